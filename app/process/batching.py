"""Many callers' round trips as one: the keys asked for while one call is in flight go together
in the next. An idle process adds no wait; a busy one (hundreds of responses starting and ending
a second) makes one round trip where it made dozens, each of which cost about as much CPU as the
work it carried. Nothing is cached: each caller's answer comes from a call that started after
it asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Batched(Generic[K, V]):
    """`await batched(key)`: the value `run_batch` gave for the key (None if it gave none), or the
    exception it raised (for every key), or the exception it gave as the key's value (for that one).

    With `lanes` above 1, keys that wait while every running call has taken longer than
    `slow_seconds` go in a call of their own, beside them: one slow call (a statement waiting on a
    lock) then holds up only its own keys. `run_batch` must allow that many calls at once."""

    def __init__(
        self,
        run_batch: Callable[[list[K]], Awaitable[Mapping[K, V | Exception]]],
        name: str,
        lanes: int = 1,
        slow_seconds: float = 0.05,
    ) -> None:
        self._run_batch = run_batch
        self._name = name
        self._lanes = lanes
        self._slow_seconds = slow_seconds
        self._waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        self._call_started: dict[asyncio.Task[None], float] = {}  # each running lane's current call
        self._check: asyncio.TimerHandle | None = None

    async def __call__(self, key: K) -> V | None:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)  # its caller may be gone (cancelled) by then
        self._waiting.setdefault(key, []).append(future)
        if not self._call_started:
            self._start_lane()
        elif len(self._call_started) < self._lanes and self._check is None:
            self._check_when_slow()
        # Shielded: a caller cancelled while its key is in flight must not cancel the others'.
        return await asyncio.shield(future)

    def _start_lane(self) -> None:
        lane = asyncio.create_task(self._run(), name=self._name)
        self._call_started[lane] = asyncio.get_running_loop().time()

    def _check_when_slow(self) -> None:
        """Arms a check for when the most recent running call becomes slow."""
        loop = asyncio.get_running_loop()
        due = max(self._call_started.values()) + self._slow_seconds
        self._check = loop.call_at(due, self._open_lane_if_slow)

    def _open_lane_if_slow(self) -> None:
        self._check = None
        if not self._waiting or not self._call_started or len(self._call_started) >= self._lanes:
            return
        now = asyncio.get_running_loop().time()
        if all(now - started >= self._slow_seconds for started in self._call_started.values()):
            self._start_lane()
        else:  # a call started since: it may well take the waiting keys in time
            self._check_when_slow()

    async def _run(self) -> None:
        lane = asyncio.current_task()
        assert lane is not None
        try:
            await self._run_lane(lane)
        finally:
            del self._call_started[lane]  # no await since the loop found nothing waiting

    async def _run_lane(self, lane: asyncio.Task[None]) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            self._call_started[lane] = asyncio.get_running_loop().time()
            try:
                results = await self._run_batch(list(batch))
            except Exception as exc:
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for key, futures in batch.items():
                result = results.get(key)
                for future in futures:
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

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
    exception it raised (for every key), or the exception it gave as the key's value (for that one)."""

    def __init__(self, run_batch: Callable[[list[K]], Awaitable[Mapping[K, V | Exception]]], name: str) -> None:
        self._run_batch = run_batch
        self._name = name
        self._waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, key: K) -> V | None:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)  # its caller may be gone (cancelled) by then
        self._waiting.setdefault(key, []).append(future)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name=self._name)
        # Shielded: a caller cancelled while its key is in flight must not cancel the others'.
        return await asyncio.shield(future)

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
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

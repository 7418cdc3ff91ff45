"""What the worker's HTTP client promises of an answer, whichever way it was reached
(workers/runtimes/http_client.py: plain connections of our own, or aiohttp for TLS and proxies)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

# Servers close idle keep-alive connections after a few seconds (uvicorn: 5); ours retire sooner.
IDLE_SECONDS = 4.0
# How long a consumer that has all it needs waits for the body's formal end (to keep the
# connection) before closing it.
END_GRACE_SECONDS = 1.0

# Takes a piece of body; True once it needs no more.
Consumer = Callable[[bytes], bool]


class HttpError(Exception):
    """The exchange failed: no connection, the server closed it early, or it sent invalid HTTP."""


@dataclass(frozen=True, slots=True)
class RequestTimeouts:
    connect: float  # to open a connection
    read: float  # the longest silence from the server, from the request on


class Answer:
    """A server's answer: its status once the headers are in, then its body."""

    @property
    def status(self) -> int:
        raise NotImplementedError

    async def deliver(self, consumer: Consumer) -> None:
        """Hands the body to `consumer` as it arrives, until the body ends or the consumer has all
        it needs; raises what the consumer raised, or why the body broke off before the consumer
        had all it needs."""
        raise NotImplementedError

    async def read(self) -> bytes:
        """The whole body."""
        pieces: list[bytes] = []

        def keep(piece: bytes) -> bool:
            pieces.append(piece)
            return False

        await self.deliver(keep)
        return b"".join(pieces)


class SilenceGuard:
    """Raises TimeoutError in the task reading once the server has been silent for `seconds`.
    One timer that re-arms itself only when it expires: aiohttp's own read timeout replaces a
    timer on every piece received, which at hundreds of streams costs the worker a fifth more CPU
    per token."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._last = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    def heard(self) -> None:
        self._last = self._loop.time()

    def _check(self) -> None:
        quiet = self._loop.time() - self._last
        if quiet >= self._seconds:
            self._expired = True
            assert self._task is not None
            self._task.cancel()
        else:
            self._timer = self._loop.call_later(self._seconds - quiet, self._check)

    def __enter__(self) -> SilenceGuard:
        self._timer = self._loop.call_later(self._seconds, self._check)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._expired and kind is asyncio.CancelledError:
            assert self._task is not None
            if self._task.uncancel() == 0:  # cancelled by this guard alone
                raise TimeoutError(f"no data from the server for {self._seconds:g} s") from error

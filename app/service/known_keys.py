"""The callers of the API keys this process saw lately, so that a client's next request costs no
statement (its authentication was a round trip to Postgres before anything else it asks).

Postgres is still the truth: a statement that revokes a key, or disables, removes or limits an
account, notifies every API process from its commit (migration 0022), and each forgets all the
keys it kept. A process keeps none while it cannot hear those notifications (starting, or its
listening connection lost), none that it found while one arrived, none it did not find (an
unknown key always costs its statement), and none longer than KEEP_SECONDS: a connection that
died without a word (a network partition, which asyncpg notices only when it next writes) lets a
revoked key in for that long at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.process.repeated_failure import RepeatedFailure
from app.storage.accounts import Caller

log = logging.getLogger(__name__)

CHANNEL = "responses_keys_changed"  # (migration 0022)
KEEP_SECONDS = 10.0
MAX_KEPT = 10_000  # keys; past that, all are forgotten and kept afresh
RELISTEN_SECONDS = 1.0


class KnownKeys:
    def __init__(
        self, lookup: Callable[[str], Awaitable[Caller | None]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lookup = lookup
        self._clock = clock
        self._kept: dict[str, tuple[Caller, float]] = {}  # key hash → its caller, until when
        self._forgotten = 0  # how many times all were forgotten: a lookup under way sees it change
        self.listening = False

    async def caller(self, key_hash: str) -> Caller | None:
        """The caller whose key has this hash (None: no live key has it), kept or looked up."""
        kept = self._kept.get(key_hash)
        if kept is not None and self._clock() < kept[1]:
            return kept[0]
        forgotten = self._forgotten
        found = await self._lookup(key_hash)
        if found is not None and self.listening and forgotten == self._forgotten:
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            self._kept[key_hash] = (found, self._clock() + KEEP_SECONDS)
        return found

    def forget(self) -> None:
        self._forgotten += 1
        self._kept.clear()

    async def listen(self, engine: AsyncEngine) -> None:
        """Hears Postgres's notifications for as long as it runs, on a connection of `engine`'s
        of its own, listening again a moment after it is lost."""
        failure = RepeatedFailure("listening for changed keys (until then each is looked up)", log)
        while True:
            try:
                await self._listen_once(engine, failure)
            except (DBAPIError, OSError):
                failure.failed()
            await asyncio.sleep(RELISTEN_SECONDS)

    async def _listen_once(self, engine: AsyncEngine, failure: RepeatedFailure) -> None:
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            lost = asyncio.Event()
            driver.add_termination_listener(lambda _: lost.set())
            await driver.add_listener(CHANNEL, lambda *_: self.forget())
            self.forget()  # (what was kept before may have changed unheard)
            self.listening = True
            failure.succeeded()
            try:
                await lost.wait()
            finally:
                self.listening = False
                self.forget()
                await conn.invalidate()

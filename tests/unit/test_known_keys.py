"""What an API process keeps of the keys it saw (app/service/known_keys.py): a key found is
looked up once while the process hears Postgres's notices, and looked up again once any key
changed, after KEEP_SECONDS, or while the process does not hear the notices; a key not found is
looked up every time."""

from __future__ import annotations

import asyncio

from app.service.known_keys import KEEP_SECONDS, KnownKeys
from app.storage.accounts import Caller, Limits

CALLER = Caller("acct_1", Limits(None, None, None))


class Lookups:
    """A stand-in for the authentication statement: counts its calls; `gate` holds one open."""

    def __init__(self, live: set[str]) -> None:
        self.live = live
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, key_hash: str) -> Caller | None:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        return CALLER if key_hash in self.live else None


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def listening(lookups: Lookups, clock: Clock | None = None) -> KnownKeys:
    keys = KnownKeys(lookups, clock or Clock())
    keys.listening = True
    return keys


async def test_a_key_found_is_looked_up_once_while_nothing_changes() -> None:
    lookups = Lookups({"a"})
    keys = listening(lookups)
    assert [await keys.caller("a") for _ in range(3)] == [CALLER] * 3
    assert lookups.calls == 1


async def test_a_change_heard_makes_every_key_be_looked_up_again() -> None:
    lookups = Lookups({"a"})
    keys = listening(lookups)
    await keys.caller("a")
    lookups.live.clear()  # revoked, and Postgres says so
    keys.forget()
    assert await keys.caller("a") is None
    assert lookups.calls == 2


async def test_a_key_not_found_is_looked_up_every_time() -> None:
    lookups = Lookups(set())
    keys = listening(lookups)
    assert [await keys.caller("unknown") for _ in range(3)] == [None] * 3
    assert lookups.calls == 3


async def test_nothing_is_kept_while_the_notices_are_not_heard() -> None:
    lookups = Lookups({"a"})
    keys = KnownKeys(lookups, Clock())  # not listening (yet, or any more)
    for _ in range(3):
        await keys.caller("a")
    assert lookups.calls == 3


async def test_a_key_is_kept_no_longer_than_keep_seconds() -> None:
    lookups, clock = Lookups({"a"}), Clock()
    keys = listening(lookups, clock)
    await keys.caller("a")
    clock.now += KEEP_SECONDS - 0.1
    await keys.caller("a")
    assert lookups.calls == 1
    clock.now += 0.2
    await keys.caller("a")
    assert lookups.calls == 2


async def test_a_lookup_under_way_when_a_change_is_heard_is_not_kept() -> None:
    """Its answer may predate the change: it is given to its request, and not kept."""
    lookups = Lookups({"a"})
    keys = listening(lookups)
    lookups.gate = asyncio.Event()
    under_way = asyncio.create_task(keys.caller("a"))
    await asyncio.sleep(0)
    keys.forget()  # a revocation's notice arrives while the statement runs
    lookups.gate.set()
    assert await under_way == CALLER
    await keys.caller("a")
    assert lookups.calls == 2

"""The event log's day partitions: made ahead, dropped whole.

`event_log` has one partition a day, `event_log_YYYY_MM_DD`, for the logs of the responses that
ended that day (their `log_key >> 32`, migrations 0015 and 0021); the logs still being written are
in `event_log_live` (app/housekeeping/live_log.py). Retention (app/housekeeping/retention.py)
purges a response's log by marking it; its rows stay until its day's partition is dropped, which
happens once every response of that day has been purged or deleted: one DROP instead of a DELETE
per row and the VACUUM after it. Partitions are made DAYS_AHEAD days ahead; a response whose day
has none (the workers were all down for days) has its events in `event_log_default`, whose rows
its purge deletes.

Both changes take the parent table's lock for a moment. While one waits for it, the event
writers' statements queue behind it, so it waits at most LOCK_TIMEOUT and is tried again on the
next pass: a day's drop stalls event commits by at most that, once.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.housekeeping import live_log

log = logging.getLogger(__name__)

DAYS_AHEAD = 2
LOCK_TIMEOUT = "100ms"
_EPOCH = datetime.date(1970, 1, 1)

_TODAY = text("SELECT floor(extract(epoch FROM now()) / 86400)::bigint")
_PARTITIONS = text(f"""
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND c.relname NOT IN ('event_log_default', '{live_log.PARTITION}')
""")
# Whether any response of the day still has its log (ended and not purged; a running one's is in
# the live partition, migration 0023).
_DAY_IN_USE = text("""
    SELECT EXISTS (SELECT 1 FROM responses WHERE log_key >= :low AND log_key < :high AND events_purged_at IS NULL)
""")


def partition_name(day: int) -> str:
    return (_EPOCH + datetime.timedelta(days=day)).strftime("event_log_%Y_%m_%d")


def day_of(name: str) -> int:
    return (datetime.datetime.strptime(name, "event_log_%Y_%m_%d").date() - _EPOCH).days


@dataclass(slots=True)
class Maintained:
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


async def create(conn: AsyncConnection, day: int) -> bool:
    await conn.execute(
        text(
            f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF event_log "
            f"FOR VALUES FROM ({day << 32}) TO ({(day + 1) << 32})"
        )
    )
    return True


async def maintain(engine: AsyncEngine) -> Maintained:
    """Makes the partitions of today and the next DAYS_AHEAD days, and drops those of past days
    whose responses have all been purged or deleted."""
    done = Maintained()
    async with engine.connect() as conn:
        today = int((await conn.execute(_TODAY)).scalar_one())
        existing = {day_of(name) for name in (await conn.execute(_PARTITIONS)).scalars()}
    for day in range(today, today + DAYS_AHEAD + 1):
        if day not in existing and await _locked(engine, f"create {partition_name(day)}", create, day):
            done.created.append(partition_name(day))
    for day in sorted(d for d in existing if d < today):
        if await _locked(engine, f"drop {partition_name(day)}", _drop_if_unused, day):
            done.dropped.append(partition_name(day))
    if done.created or done.dropped:
        log.info("event log partitions: made %s, dropped %s", done.created, done.dropped)
    return done


async def _in_use(conn: AsyncConnection, day: int) -> bool:
    return bool((await conn.execute(_DAY_IN_USE, {"low": day << 32, "high": (day + 1) << 32})).scalar_one())


async def _drop_if_unused(conn: AsyncConnection, day: int) -> bool:
    if await _in_use(conn, day):  # the common case, without waiting for a lock
        return False
    # Then the lock, and the same question again: a writer still adding to this day holds it,
    # and a response created from now on finds no partition for its day and writes to the
    # default one, so nothing is lost.
    await conn.execute(text(f"LOCK TABLE {partition_name(day)} IN ACCESS EXCLUSIVE MODE"))
    if await _in_use(conn, day):
        return False
    await conn.execute(text(f"DROP TABLE {partition_name(day)}"))
    return True


async def _locked(
    engine: AsyncEngine, what: str, change: Callable[[AsyncConnection, int], Awaitable[bool]], day: int
) -> bool:
    """Runs `change(conn, day)` in a transaction that waits at most LOCK_TIMEOUT for a lock."""
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            return await change(conn, day)
    except DBAPIError:
        log.warning("event log partitions: could not %s now; trying again on the next pass", what, exc_info=True)
        return False

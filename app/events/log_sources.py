"""Where a follower (app/events/follow.py) finds a response's events that did not reach it live:
those before it subscribed, those of a message it missed or that a notice stands for, and those
committed while it was idle. A durable response's events lie in its Postgres log (`StoredLog`);
a foreground store=false response has no log, and its worker leaves the events that did not
travel on the channel in Redis overflow keys (`RedisOnlyLog`, app/events/channel.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from app import errors
from app.events.channel import Notice, read_overflow
from app.events.log_reader import PAGE, LogReader
from app.protocol.encoding import WireEvent
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.queue.transient_runs import still_coming
from app.storage.events import LogPage


class FollowLost(errors.GenerationFailed):
    """The response can no longer be followed: it was deleted, or its store=false worker died."""


class LogSource(Protocol):
    @property
    def postgres_patience(self) -> float:
        """How long a follower waits, kept alive, while Postgres is unreachable (as long as
        workers retry their commits)."""

    async def stored(self, response_id: str, after: int) -> LogPage | None:
        """A page of the log after `after`; None where nothing is stored."""

    async def missed(self, response_id: str, last: int, live: list[WireEvent]) -> list[WireEvent]:
        """The events after `last` up to this live batch, whose first ones did not come."""

    async def noticed(self, response_id: str, last: int, notice: Notice) -> list[WireEvent]:
        """The events a notice stands for (and any this follower missed before them)."""

    async def caught_up(self, response_id: str, last: int) -> tuple[list[WireEvent], bool]:
        """What came after `last` while the follower was idle, and whether the response has ended."""


@dataclass(frozen=True)
class StoredLog:
    """A durable response's log, read through the process's log reader. Its events are published
    only once committed, so the log holds every event a follower was sent or missed."""

    reader: LogReader
    postgres_patience: float = 60.0

    async def stored(self, response_id: str, after: int) -> LogPage:
        page = await self.reader.read(response_id, after)
        if not page.found:
            raise FollowLost(f"Response with id '{response_id}' was deleted.")
        return page

    async def missed(self, response_id: str, last: int, live: list[WireEvent]) -> list[WireEvent]:
        return (await self.caught_up(response_id, last))[0]

    async def noticed(self, response_id: str, last: int, notice: Notice) -> list[WireEvent]:
        return (await self.caught_up(response_id, last))[0]

    async def caught_up(self, response_id: str, last: int) -> tuple[list[WireEvent], bool]:
        """Every event the log holds after `last`, and whether the response has ended (read with its
        events, so an ended response's log holds everything)."""
        events: list[WireEvent] = []
        while True:
            page = await self.stored(response_id, last)
            events += page.events
            if len(page.events) < PAGE:
                return events, page.ended
            last = page.events[-1].sequence_number


LOST_ON_THE_WAY = "events of this store=false response were lost on their way through Redis"


@dataclass(frozen=True)
class RedisOnlyLog:
    """A store=false response's events that did not travel on the channel (large ones, and those
    held back by a Redis outage), in overflow keys; and, through its claim and alive keys, whether
    a worker still has it. `redis_patience`: how long a follower waits for Redis to come back;
    `lease_seconds`: how long a live worker may take to say so again once it is back."""

    redis: Redis
    redis_patience: float = 60.0
    lease_seconds: float = 30.0
    postgres_patience: float = 60.0  # (never read: nothing of it is in Postgres)

    async def stored(self, response_id: str, after: int) -> None:
        return None

    async def missed(self, response_id: str, last: int, live: list[WireEvent]) -> list[WireEvent]:
        missed = await read_overflow(self.redis, response_id, last)
        if (missed[-1].sequence_number if missed else last) + 1 < live[0].sequence_number:
            raise FollowLost(LOST_ON_THE_WAY)
        return missed + live

    async def noticed(self, response_id: str, last: int, notice: Notice) -> list[WireEvent]:
        if notice.last <= last:  # read already, after a missed message
            return []
        events = await read_overflow(self.redis, response_id, last)
        if not events or events[-1].sequence_number < notice.last:
            raise FollowLost(LOST_ON_THE_WAY)
        return events

    async def caught_up(self, response_id: str, last: int) -> tuple[list[WireEvent], bool]:
        """What its worker left after `last` in overflow keys; with none, whether a worker still has
        it or it is still queued. While Redis is away it waits, up to `redis_patience`. (It never
        says the response ended: its terminal event does.)"""
        try:
            if events := await read_overflow(self.redis, response_id, last):
                return events, False
            coming = await still_coming(self.redis, response_id)
        except REDIS_DOWN as error:
            REDIS_LINK.failed("following a store=false response", error)
            if REDIS_LINK.down_for > self.redis_patience:
                raise FollowLost(
                    f"Redis has been unreachable for over {self.redis_patience:.0f}s: the events of this "
                    "store=false response, which travel only through Redis, cannot reach this stream"
                ) from error
            return [], False
        REDIS_LINK.answered()
        # Once Redis is back (perhaps empty), a live worker says so again within a lease.
        if not coming and REDIS_LINK.up_for > self.lease_seconds:
            raise FollowLost("the worker generating this store=false response was lost")
        return [], False

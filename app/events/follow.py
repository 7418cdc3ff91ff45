"""Following a response's event log: read what is there after N, then take live events as they
are committed, until the terminal event. Live streaming and resuming are this one code path
(design invariant 2); events keep their sequence numbers, without gap or duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from app import errors
from app.events.channel import Notice, read_overflow
from app.events.hub import Idle, Subscription
from app.events.log_reader import PAGE, LogReader
from app.process.repeated_failure import RepeatedFailure
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.queue.transient_runs import still_coming
from app.storage.driver import unreachable
from app.storage.events import LogPage

log = logging.getLogger(__name__)
# One for all the followers of the process: an outage is logged when it begins and when it ends.
_READS = RepeatedFailure("reading the event log for its followers", log)


class FollowLost(errors.GenerationFailed):
    """The response can no longer be followed: it was deleted, or its store=false worker died."""


@dataclass(frozen=True)
class LogSource:
    """Where a response's events can be re-read: Postgres (through the process's log reader)
    for durable responses; nowhere (live only) for foreground store=false ones, whose liveness
    Redis tells. `redis_patience`: how long a store=false follower waits for Redis to come back;
    `postgres_patience`: how long a durable one waits for Postgres (as long as workers retry
    their commits); `lease_seconds`: how long a live worker may take to say so again once Redis
    is back."""

    reader: LogReader
    redis: Redis
    durable: bool
    redis_patience: float = 60.0
    lease_seconds: float = 30.0
    postgres_patience: float = 60.0


async def follow(
    source: LogSource,
    subscription: Subscription,
    response_id: str,
    after: int,
    *,
    known_log: Sequence[WireEvent] | None = None,
    first_page: LogPage | None = None,
) -> AsyncIterator[list[WireEvent] | None]:
    """Yields the events after `after` in order, in batches as they come (a page of the log, a
    commit's worth of live events), and None after each idle period (a keep-alive moment); ends
    after the terminal event. Closes the subscription when done.

    `known_log`: the whole log when the caller subscribed, because nothing else could have
    written to it yet (the caller created the response and has not enqueued it): the log is
    not read. `first_page`: the log after `after`, read by the caller once it had subscribed."""
    cursor = _Cursor(after)
    outage = _Outage(source.postgres_patience)
    try:
        if known_log is not None:
            if ready := cursor.next_of(list(known_log)):
                yield ready
        elif source.durable:
            try:
                async for ready in _stored(source, response_id, cursor, first_page):
                    yield ready
            except Exception as error:  # a later page: the live loop's next read of the log brings it
                outage.met(error)
        while not cursor.done:
            live = await subscription.next_batch()
            try:
                batch, ended = await _resolved(source, response_id, cursor.last, live)
            except Exception as error:
                # Postgres is away, or every connection is taken: the stream waits, kept alive,
                # and a later read of the log (the next gap or idle period) brings what this one
                # would have. Nothing is lost meanwhile: workers hold their events until they
                # commit them, and publish them only then.
                outage.met(error)
                yield None
                continue
            outage.over()
            if ended and not batch:
                return
            if isinstance(live, Idle):
                yield None
            if ready := cursor.next_of(batch):
                yield ready
    finally:
        await subscription.close()


async def _stored(
    source: LogSource, response_id: str, cursor: _Cursor, first_page: LogPage | None
) -> AsyncIterator[list[WireEvent]]:
    """What the log holds after the cursor, a page at a time (the first byte need not wait for the
    last); the cursor is done if the response ended (with or without a terminal event after it:
    nothing is left to follow)."""
    page = first_page or await _read(source, response_id, cursor.last)
    while True:
        if ready := cursor.next_of(page.events):
            yield ready
        if cursor.done:
            return
        if len(page.events) < PAGE:
            cursor.done = page.ended  # (the read saw its status with its events)
            return
        page = await _read(source, response_id, cursor.last)


async def _read(source: LogSource, response_id: str, after: int) -> LogPage:
    page = await source.reader.read(response_id, after)
    if not page.found:
        raise FollowLost(f"Response with id '{response_id}' was deleted.")
    return page


async def _read_all(source: LogSource, response_id: str, after: int) -> tuple[list[WireEvent], bool]:
    """Every event the log holds after `after`, and whether the response has ended."""
    events: list[WireEvent] = []
    while True:
        page = await _read(source, response_id, after)
        events += page.events
        if len(page.events) < PAGE:
            return events, page.ended
        after = page.events[-1].sequence_number


class _Outage:
    """How long one follower's reads of the log have failed for Postgres being unreachable."""

    def __init__(self, patience: float) -> None:
        self._patience = patience
        self._since: float | None = None

    def met(self, error: Exception) -> None:
        """Re-raises an error that is not an outage, and an outage past its patience."""
        if not unreachable(error):
            raise error
        _READS.failed()
        now = time.monotonic()
        if self._since is None:
            self._since = now
        elif now - self._since > self._patience:
            raise errors.ServiceUnavailable(
                f"The database has been unreachable for over {self._patience:.0f}s: this stream cannot "
                "read its response's events. Retrieve the response, or resume its stream, once the "
                "service is back."
            ) from error

    def over(self) -> None:
        if self._since is not None:
            self._since = None
            _READS.succeeded()


class _Cursor:
    """The last sequence number delivered: passes on only the next events in order, once each."""

    def __init__(self, after: int) -> None:
        self.last = after
        self.done = False

    def next_of(self, events: list[WireEvent]) -> list[WireEvent]:
        ready = []
        for event in events:
            if self.done or event.sequence_number != self.last + 1:
                continue
            ready.append(event)
            self.last = event.sequence_number
            self.done = event.type in TERMINAL_EVENT_TYPES
        return ready


async def _resolved(
    source: LogSource, response_id: str, last: int, live: list[WireEvent] | Notice | Idle
) -> tuple[list[WireEvent], bool]:
    """What a live batch gives to deliver, and whether the response has ended (said only after
    an idle period): a notice is read from where its events lie, a gap from the log."""
    if isinstance(live, Idle):
        return await _after_idle(source, response_id, last, live)
    if isinstance(live, Notice):
        return await _noticed(source, response_id, last, live), False
    if live[0].sequence_number > last + 1:  # we missed a message: the log (or an overflow key) has it
        if source.durable:
            return (await _catch_up(source, response_id, last))[0], False
        missed = await read_overflow(source.redis, response_id, last)
        if (missed[-1].sequence_number if missed else last) + 1 < live[0].sequence_number:
            raise FollowLost(LOST_ON_THE_WAY)
        return missed + live, False
    return live, False


LOST_ON_THE_WAY = "events of this store=false response were lost on their way through Redis"


async def _noticed(source: LogSource, response_id: str, last: int, notice: Notice) -> list[WireEvent]:
    """The events a notice stands for (and, from the log, any this follower missed before them)."""
    if source.durable:
        return (await _read_all(source, response_id, last))[0]
    if notice.last <= last:  # read already, after a missed message
        return []
    events = await read_overflow(source.redis, response_id, last)
    if not events or events[-1].sequence_number < notice.last:
        raise FollowLost(LOST_ON_THE_WAY)
    return events


async def _after_idle(source: LogSource, response_id: str, last: int, idle: Idle) -> tuple[list[WireEvent], bool]:
    """`_catch_up`, unless the hub's check found nothing to catch up."""
    if idle.state is not None and idle.state.holds_nothing_after(last):
        return [], False
    return await _catch_up(source, response_id, last)  # it may have ended, or we missed a message


async def _catch_up(source: LogSource, response_id: str, last: int) -> tuple[list[WireEvent], bool]:
    """What the log holds after `last`, and whether the response has ended (read with its events,
    so an ended response's log holds everything). Used when nothing arrived for a while, it also
    heals a lost Redis message."""
    if not source.durable:
        return await _transient_catch_up(source, response_id, last), False
    return await _read_all(source, response_id, last)


async def _transient_catch_up(source: LogSource, response_id: str, last: int) -> list[WireEvent]:
    """A store=false response has no log: what its worker left after `last` in overflow keys
    (events that did not travel on the channel: large ones, and those held back by a Redis
    outage). With none, whether a worker still has it or it is still queued. While Redis is away
    it waits, up to `redis_patience`."""
    try:
        if events := await read_overflow(source.redis, response_id, last):
            return events
        coming = await still_coming(source.redis, response_id)
    except REDIS_DOWN as error:
        REDIS_LINK.failed("following a store=false response", error)
        if REDIS_LINK.down_for > source.redis_patience:
            raise FollowLost(
                f"Redis has been unreachable for over {source.redis_patience:.0f}s: the events of this "
                "store=false response, which travel only through Redis, cannot reach this stream"
            ) from error
        return []
    REDIS_LINK.answered()
    # Once Redis is back (perhaps empty), a live worker says so again within a lease.
    if not coming and REDIS_LINK.up_for > source.lease_seconds:
        raise FollowLost("the worker generating this store=false response was lost")
    return []

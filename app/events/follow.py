"""Following a response's event log: read what is there after N, then take live events as they
are committed, until the terminal event. Live streaming and resuming are this one code path
(design invariant 2); events keep their sequence numbers, without gap or duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence

from app import errors
from app.events.channel import Notice
from app.events.hub import Idle, Subscription
from app.events.log_reader import PAGE
from app.events.log_sources import LogSource
from app.process.repeated_failure import RepeatedFailure
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.storage.driver import unreachable
from app.storage.events import LogPage

log = logging.getLogger(__name__)
# One for all the followers of the process: an outage is logged when it begins and when it ends.
_READS = RepeatedFailure("reading the event log for its followers", log)


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
        else:
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
    page = first_page or await source.stored(response_id, cursor.last)
    while page is not None:
        if ready := cursor.next_of(page.events):
            yield ready
        if cursor.done:
            return
        if len(page.events) < PAGE:
            cursor.done = page.ended  # (the read saw its status with its events)
            return
        page = await source.stored(response_id, cursor.last)


async def _resolved(
    source: LogSource, response_id: str, last: int, live: list[WireEvent] | Notice | Idle
) -> tuple[list[WireEvent], bool]:
    """What a live batch gives to deliver, and whether the response has ended (said only after
    an idle period): a notice, a gap and an idle period are read from where the events lie."""
    if isinstance(live, Idle):
        if live.state is not None and live.state.holds_nothing_after(last):  # (the hub's check)
            return [], False
        return await source.caught_up(response_id, last)  # it may have ended, or we missed a message
    if isinstance(live, Notice):
        return await source.noticed(response_id, last, live), False
    if live[0].sequence_number > last + 1:  # we missed a message
        return await source.missed(response_id, last, live), False
    return live, False


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

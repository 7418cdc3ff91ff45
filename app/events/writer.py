"""The event writer: numbers events, group-commits them, then publishes what was committed.

One writer per worker process. Generations hand it events without waiting; a single flusher
commits everything pending (many events of many responses) with one statement — in one
transaction with the terminal status of any response that ends in the batch — then publishes
each response's new events on its Redis channel. Commits of streaming output come at most every
RESPONSES_EVENT_COMMIT_INTERVAL_SECONDS (and, past a batch size, after a pause of a few
commit-times): a response's deltas that wait for the same commit merge into one event, one row
and one message, so a token costs a fraction of a commit, a row, a publish and an SSE write
even when few responses stream. Once a commit is due it goes with the next events to arrive
(within DUE_GRACE of the interval at the latest): woken by their arrival, which the process pays
for anyway, rather than by a timer of its own; on a virtual machine being woken costs a process
more CPU than a commit's own work (`wake_up_cost` in bench/idle_benchmark.py). A response's
first output and its end do not wait: they go out at once (under load, within URGENT_SPACING),
alone, since that is what a client waits on (its first token, its answer's end). Its opening
events wait for its first output, a commit interval at most (`open`): committed alone, they
would cost a commit of their own, and compete for the CPU with the runtime request that the
first token waits on. Nothing is published before its commit (design invariant 2).

A commit that Postgres refuses for its data, not for its connection, is not retried: the batch's
responses commit one by one, and one whose own events are refused stops streaming and is ended
by its generation as failed (see `refused`), while the others go through. A response whose
events the commit dropped because it had already ended elsewhere (reaped, deleted) has its
generation stopped too (`on_dropped`): nothing it still produces can be written.

`store=false` foreground responses never touch Postgres: their events are numbered here and only
published, to the one API process that follows them. While Redis is away their events are held
(app/events/transient_backlog.py) and published once it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.events import channel
from app.events.transient_backlog import TransientBacklog
from app.process.repeated_failure import RepeatedFailure
from app.process.side_tasks import SideTasks
from app.protocol import encoding
from app.protocol.encoding import WireEvent
from app.protocol.shapes import Event
from app.protocol.vocabulary import MERGEABLE_DELTAS
from app.queue.redis_link import Backoff
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.driver import numbered_twice, refused_data
from app.storage.held import HeldConnection

log = logging.getLogger(__name__)

# What a generation hands one response's events to the writer by (EventWriter.append, bound to it).
Emit = Callable[[list[Event]], None]

BUSY_BATCH_RESPONSES = 16  # a batch carrying this many responses' events means load
MAX_FLUSH_INTERVAL = 0.1
# Commits of only starting and ending responses while the others gather: each costs about as much
# as a full one, so while commits are slow (the pause under load outlasts the commit interval) at
# most one every URGENT_SPACING on average (forty a second), a few at once (URGENT_BURST) at once.
URGENT_SPACING = 0.025
URGENT_BURST = 4
# A due commit waits at most this share of the commit interval more for events to arrive with.
DUE_GRACE = 0.5
_NOTHING_DUE = float("inf")


def pause_after(batch_responses: int, flush_seconds: float) -> float:
    """How long from one flush's start to the next. While few responses stream, flush again as
    soon as anything arrives; when many do, let the next batch gather a few commit-times."""
    return 0.0 if batch_responses < BUSY_BATCH_RESPONSES else min(MAX_FLUSH_INTERVAL, 4 * flush_seconds)


@dataclass
class _Pending:
    events: list[Event] = field(default_factory=list)
    outcome: responses_db.Outcome | None = None
    finished: asyncio.Future[bool] | None = None


def _coalesce(pending: list[Event], event: Event) -> bool:
    """Folds a delta into the previous one of the same part while both wait for the same commit:
    under load, fewer and larger deltas (as OpenAI's own are of any size); when idle, one event
    per chunk."""
    if event["type"] not in MERGEABLE_DELTAS or not pending:
        return False
    last = pending[-1]
    if (
        last["type"] != event["type"]
        or last["item_id"] != event["item_id"]
        or last.get("content_index") != event.get("content_index")
        or last.get("summary_index") != event.get("summary_index")
    ):
        return False
    last["delta"] += event["delta"]
    if event.get("logprobs"):  # a text delta's tokens (each delta event has a list of its own)
        last["logprobs"].extend(event["logprobs"])
    return True


class EventWriter:
    def __init__(
        self,
        engine: AsyncEngine,
        redis: Redis,
        channel: str,
        pause: Callable[[int, float], float] = pause_after,
        worker_id: str | None = None,
        commit_interval: float = 0.0,
        commit_patience: float = 60.0,
    ) -> None:
        """`worker_id`: commit only the events of responses this worker still runs (a response
        handed over or reaped while it stalled may be another worker's now). `commit_interval`:
        the least time from one flush's start to the next that is not urgent. `commit_patience`:
        how long a commit is retried while Postgres is away."""
        self._worker_id = worker_id
        self._commit_interval = commit_interval
        self._commit_patience = commit_patience
        self._commit_failure = RepeatedFailure("the event commit", log)
        self._connection = HeldConnection(engine)
        self._redis = redis
        self._channel = channel
        self._pause = pause
        self._pending: dict[str, _Pending] = {}
        self._transient_next: dict[str, int] = {}
        self._backlog = TransientBacklog()
        self._wake = asyncio.Event()
        # Responses whose pending events hold their first output or their end: they skip the pause.
        self._urgent: set[str] = set()
        # Responses not yet claimed whose runtime was asked already: their events wait here for
        # the claim (`open`), or go with it (`drop_held`).
        self._held: dict[str, list[Event]] = {}
        # Responses whose opening events wait for their first output: when they go without it.
        self._opening_due: dict[str, asyncio.TimerHandle] = {}
        self._urgent_times: deque[float] = deque(maxlen=URGENT_BURST)  # of the last urgent commits
        # Set by what may not wait for the next full commit: urgent events, and (not under load)
        # events arriving once it is due.
        self._go = asyncio.Event()
        self._due_at = _NOTHING_DUE  # when the next full commit is due, while the flusher waits for it
        # Responses whose first output was handed over: what follows it waits for the paced commit,
        # even while that first output's own commit is still under way.
        self._streaming: set[str] = set()
        self._side_tasks = SideTasks()
        self._flushing = asyncio.Lock()  # the flusher's and close's flushes, one after the other
        self._last_batch_size = 0
        # Responses whose events Postgres refused: later ones are dropped, and their generation
        # is stopped (`on_dropped`) and ends them without output.
        self._refused: set[str] = set()
        # The number each durable response's next event takes, known from this writer's last
        # commit of it: what tells a commit that landed although its answer was lost (`_landed`).
        self._next_number: dict[str, int] = {}
        self.on_dropped: Callable[[str], None] = lambda response_id: None
        self.batches = 0  # counters for the benchmark and operators
        self.events_written = 0

    def start(self) -> None:
        self._side_tasks.start("event-writer", self._run)
        self._side_tasks.start("held-events", self._publish_held)

    async def close(self) -> None:
        for due in self._opening_due.values():
            due.cancel()
        while self._pending:
            await self._flush_pending()
        async with self._flushing:  # the flusher is idle now: stopping it loses nothing
            await self._side_tasks.close()
        await self._connection.close()

    def expect(self, response_id: str, first: int) -> None:
        """The number this durable response's next event takes, as its job knows it before its
        first commit (a fresh response's log holds only what its create stored): that commit,
        too, is then recognized should its answer be lost."""
        if response_id not in self._transient_next:
            self._next_number.setdefault(response_id, first)

    def open_transient(self, response_id: str) -> None:
        """Numbers this response's events here, from 0, and never writes them to Postgres."""
        self._transient_next[response_id] = 0

    def hold(self, response_id: str) -> None:
        """Keeps this response's events uncommitted until it is opened (its claim made), or dropped."""
        self._held[response_id] = []

    def drop_held(self, response_id: str) -> None:
        """Forgets the events held for this response (its claim failed: it is not this worker's)."""
        self._held.pop(response_id, None)

    def append(self, response_id: str, events: list[Event]) -> None:
        if (held := self._held.get(response_id)) is not None:
            held.extend(events)
            return
        if response_id in self._refused or not events:  # (nothing to commit is not a response ended elsewhere)
            return
        pending = self._pending.setdefault(response_id, _Pending()).events
        for event in events:
            if not _coalesce(pending, event):
                pending.append(event)
                if event["type"] in MERGEABLE_DELTAS and response_id not in self._streaming:
                    self._streaming.add(response_id)
                    self._hurry(response_id)  # its first output
        self._wake.set()
        if self._due_at != _NOTHING_DUE and asyncio.get_running_loop().time() >= self._due_at:
            self._go.set()

    def open(self, response_id: str, events: list[Event]) -> None:
        """A response's opening events (`created`, `in_progress`), then those held for it: they
        wait for its first output and go in its commit (one commit, publish and SSE write where
        there were two), a commit interval at most (a slow prefill, an answer that starts with no
        text)."""
        held = self._held.pop(response_id, [])
        if self._commit_interval <= 0 or response_id in self._refused:
            self.append(response_id, events)
        else:
            self._pending.setdefault(response_id, _Pending()).events.extend(events)
            loop = asyncio.get_running_loop()
            self._opening_due[response_id] = loop.call_later(self._commit_interval, self._opened, response_id)
        self.append(response_id, held)

    def _opened(self, response_id: str) -> None:
        del self._opening_due[response_id]
        if response_id in self._pending:  # (else a full commit took them)
            self._hurry(response_id)
            self._wake.set()

    def _hurry(self, response_id: str) -> None:
        if (due := self._opening_due.pop(response_id, None)) is not None:
            due.cancel()
        self._urgent.add(response_id)
        self._go.set()

    async def drain(self, response_id: str) -> None:
        """Returns once the events of this response handed over so far are committed (or dropped)."""
        while response_id in self._pending:
            await self._flush_pending()
        async with self._flushing:  # a flush already under way has ended
            pass

    async def committed(self, response_id: str) -> bool:
        """Returns once the events of this response handed over so far are committed, by the next
        urgent commit (beside those of other responses waiting too, unlike `drain`); False if
        they were dropped."""
        pending = self._pending.get(response_id)
        if pending is None:  # nothing waits, or its events are in the commit under way
            async with self._flushing:
                return response_id not in self._refused
        if pending.finished is None:
            pending.finished = asyncio.get_running_loop().create_future()
        self._hurry(response_id)
        self._wake.set()
        return await pending.finished

    def holds(self, response_id: str) -> bool:
        """Whether events of this transient response wait for Redis to come back."""
        return response_id in self._backlog

    def refused(self, response_id: str) -> bool:
        """Whether Postgres refused events of this response (it can still be finished)."""
        return response_id in self._refused

    async def finish(self, response_id: str, events: list[Event], outcome: responses_db.Outcome) -> bool:
        """Appends the closing events and ends the response, atomically; False if it had already
        ended (cancelled, deleted), or if Postgres refused them, in which case nothing of this is
        written."""
        self._refused.discard(response_id)
        pending = self._pending.setdefault(response_id, _Pending())
        pending.events.extend(events)
        pending.outcome = outcome
        pending.finished = asyncio.get_running_loop().create_future()
        self._hurry(response_id)
        self._wake.set()
        return await pending.finished

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            started = loop.time()
            await self._flush_pending()
            took = loop.time() - started
            # Pace the flushes: a commit costs about the same CPU for 1 event as for 100, so the
            # next batch gathers for the commit interval, and under load for longer (text deltas
            # coalesce meanwhile). What is urgent goes at once, or under load soon.
            pause = self._pause(self._last_batch_size, took)
            deadline = started + max(self._commit_interval, pause)
            if pause > self._commit_interval:  # commits themselves take long: space the urgent ones
                await self._gather_loaded(deadline)
            else:
                await self._gather(deadline)

    async def _gather(self, due_at: float) -> None:
        """Until the next full commit: urgent commits at once; the full commit once due, with the
        next events to arrive, or a grace later at the latest."""
        loop = asyncio.get_running_loop()
        self._due_at = due_at
        latest = loop.call_at(due_at + DUE_GRACE * self._commit_interval, self._go.set)
        try:
            while True:
                await self._go.wait()
                self._go.clear()
                if loop.time() >= due_at:
                    return
                await self._flush_urgent()
        finally:
            self._due_at = _NOTHING_DUE
            latest.cancel()

    async def _gather_loaded(self, deadline: float) -> None:
        """Under load: urgent commits spaced (URGENT_SPACING), the full commit at the deadline."""
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            try:
                async with asyncio.timeout(left):
                    await self._go.wait()
            except TimeoutError:
                break
            if await self._urgent_room(deadline):
                await self._flush_urgent()

    async def _urgent_room(self, deadline: float) -> bool:
        """Waits, if URGENT_BURST urgent commits went within the last URGENT_BURST times URGENT_SPACING,
        until another may go; False if the deadline (the next full commit) comes first."""
        loop = asyncio.get_running_loop()
        if len(self._urgent_times) == URGENT_BURST:
            room_at = self._urgent_times[0] + URGENT_BURST * URGENT_SPACING
            if room_at >= deadline:
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                return False
            await asyncio.sleep(max(0.0, room_at - loop.time()))
        self._urgent_times.append(loop.time())
        return True

    async def _flush_pending(self) -> None:
        self._wake.clear()
        self._go.clear()
        self._urgent.clear()
        batch, self._pending = self._pending, {}
        self._last_batch_size = len(batch)
        await self._flush(batch)

    async def _flush_urgent(self) -> None:
        """Only the responses starting or ending; the others keep gathering."""
        self._go.clear()
        urgent, self._urgent = self._urgent, set()
        await self._flush({rid: self._pending.pop(rid) for rid in urgent if rid in self._pending})

    async def _flush(self, batch: dict[str, _Pending]) -> None:
        if not batch:
            return
        committed: dict[str, list[WireEvent]] = {}
        try:
            async with self._flushing:
                await self._commit_and_publish(batch, committed)
        except BaseException as exc:
            # Whatever broke, no generation may wait for ever on what it handed over.
            for rid, pending in batch.items():
                if pending.finished and not pending.finished.done():
                    if rid in committed:
                        pending.finished.set_result(True)
                    else:
                        pending.finished.set_exception(exc if isinstance(exc, Exception) else RuntimeError(exc))
            raise
        for rid, pending in batch.items():
            if pending.outcome is not None:
                self._streaming.discard(rid)
            if pending.finished and not pending.finished.done():
                pending.finished.set_result(rid in committed)

    async def _commit_and_publish(self, batch: dict[str, _Pending], committed: dict[str, list[WireEvent]]) -> None:
        """Fills `committed` with each response's events as they were numbered, as it goes."""
        durable = {rid: p for rid, p in batch.items() if rid not in self._transient_next}
        try:
            committed |= await self._commit_with_retry(durable) if durable else {}
        except Exception as exc:
            log.exception("giving up on %d responses' events", len(durable))
            for pending in durable.values():
                if pending.finished and not pending.finished.done():
                    pending.finished.set_exception(exc)
        else:
            for rid in durable.keys() - committed.keys() - self._refused:
                if durable[rid].outcome is None:  # ended elsewhere while it was still generating
                    self.on_dropped(rid)
        transient = [rid for rid in batch if rid in self._transient_next]
        for rid in transient:
            pending = batch[rid]
            encoded = [encoding.encode(event) for event in pending.events]
            committed[rid] = encoding.numbered(pending.events, encoded, self._transient_next[rid])
            self._transient_next[rid] += len(pending.events)
            if pending.outcome is not None:
                del self._transient_next[rid]
        to_publish = dict(committed)
        self._backlog.hold_behind(to_publish)
        spill = self._backlog.spill(transient)
        if not await channel.publish(self._redis, self._channel, to_publish, transient=set(transient), spill=spill):
            self._backlog.hold({rid: to_publish[rid] for rid in transient if rid in to_publish})

    async def _publish_held(self) -> None:
        """Publishes the transient responses' held events once Redis is back."""
        backoff = Backoff(most=1.0)  # their followers wait: try often
        while True:
            await self._backlog.waiting.wait()
            await asyncio.sleep(backoff.next())
            async with self._flushing:  # no commit publishes meanwhile: events keep their order
                if await self._backlog.publish(self._redis, self._channel):
                    backoff.reset()

    async def _commit_with_retry(self, batch: dict[str, _Pending]) -> dict[str, list[WireEvent]]:
        """Commits the batch, trying again while Postgres is away. An attempt whose answer was lost
        may have committed all the same (the connection broke after the statement ran; a primary
        failed over once its standby had the commit): before each new attempt, the events found
        in the log as they would be numbered are taken as committed, not written twice."""
        delay, started = 0.05, time.monotonic()
        landed: dict[str, list[WireEvent]] = {}
        tried = False
        while True:
            try:
                if tried:
                    landed |= await self._landed(batch)
                    batch = {rid: pending for rid, pending in batch.items() if rid not in landed}
                committed = await self._commit(batch) if batch else {}
            except (OperationalError, DBAPIError, OSError) as exc:
                if refused_data(exc):
                    rest = await self._commit_apart(batch) if len(batch) > 1 else self._refuse(batch, exc)
                    return landed | rest
                tried = True
                self._commit_failure.failed()
                if time.monotonic() - started >= self._commit_patience:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                self._commit_failure.succeeded()
                return landed | committed

    async def _landed(self, batch: dict[str, _Pending]) -> dict[str, list[WireEvent]]:
        """The responses of the batch whose events the log holds already, exactly as they would
        have been numbered after this writer's last commit of each, with those events."""
        expected = {rid: self._next_number[rid] for rid in batch if rid in self._next_number}
        if not expected:
            return {}
        longest = max(len(batch[rid].events) for rid in expected)
        async with self._connection.use() as conn:
            pages = await events_db.logs_after(conn, [(rid, first - 1) for rid, first in expected.items()], longest)
        landed = {}
        for rid, first in expected.items():
            events = batch[rid].events
            ours = encoding.numbered(events, [encoding.encode(event) for event in events], first)
            page = pages.get((rid, first - 1))
            if page is not None and [e.json for e in page.events] == [e.json for e in ours]:
                landed[rid] = ours
                self._learn_numbers(rid, batch[rid], ours)
        if landed:
            log.warning("%d responses' events were committed by an attempt whose answer was lost", len(landed))
        return landed

    def _learn_numbers(self, response_id: str, pending: _Pending, committed: list[WireEvent] | None) -> None:
        """Where this response's next event is numbered (forgotten once it ended, or is not this
        writer's to write)."""
        if pending.outcome is not None or committed is None:
            self._next_number.pop(response_id, None)
        elif committed:
            self._next_number[response_id] = committed[-1].sequence_number + 1

    async def _commit_apart(self, batch: dict[str, _Pending]) -> dict[str, list[WireEvent]]:
        committed: dict[str, list[WireEvent]] = {}
        for response_id, pending in batch.items():
            committed |= await self._commit_with_retry({response_id: pending})
        return committed

    def _refuse(self, batch: dict[str, _Pending], exc: Exception) -> dict[str, list[WireEvent]]:
        [response_id] = batch
        if numbered_twice(exc):  # another writer took it first (a cancel, the reaper, a continuation)
            log.warning("response %s: its events were numbered by another writer first; it is stopped", response_id)
            self.on_dropped(response_id)
            return {}
        log.error("response %s: Postgres refused its events; it is stopped", response_id, exc_info=exc)
        self._refused.add(response_id)
        self.on_dropped(response_id)
        return {}

    async def _commit(self, batch: dict[str, _Pending]) -> dict[str, list[WireEvent]]:
        events = {rid: p.events for rid, p in batch.items()}
        endings = {rid: p.outcome for rid, p in batch.items() if p.outcome is not None}
        # One statement, atomic by itself (a terminal status commits with its terminal event or
        # not at all), however many responses end in the batch: no BEGIN/COMMIT round trips.
        async with self._connection.use() as conn:
            committed = await events_db.append_many(conn, events, endings, self._worker_id)
        for rid, pending in batch.items():
            self._learn_numbers(rid, pending, committed.get(rid))
        self.batches += 1
        self.events_written += sum(len(e) for e in committed.values())
        return committed

"""One Redis pub/sub connection per API process, fanned out to every follower in it.

The process stays subscribed to the deployment's events channel (app/events/channel.py) and
hands each follower the events of its response. Following starts once the channel is
subscribed, so a follower that registers and then reads Postgres misses nothing in between.
This is a cache of live signals, not state: any replica can follow any response (design
invariant 7).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from app import errors
from app.events.channel import Notice, decode_message
from app.process.repeated_failure import RepeatedFailure
from app.process.side_tasks import SideTasks
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import TERMINAL_STATUSES
from app.queue.redis_listener import listen_for_ever
from app.storage import events as events_db

log = logging.getLogger(__name__)

SUBSCRIBE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class LogState:
    """A durable response as the hub's check of all its idle followers found it."""

    ended: bool
    last_sequence_number: int  # of its last committed event; -1 before the first

    def holds_nothing_after(self, last_delivered: int) -> bool:
        """Whether a follower that delivered up to `last_delivered` missed nothing and has more to wait for."""
        return not self.ended and self.last_sequence_number <= last_delivered


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing came for an idle period. `state`: what the hub's check found; None where it did not
    check (a transient response, one no longer in Postgres, or the check failed): the follower
    checks for itself."""

    state: LogState | None = None


@dataclass(eq=False)
class Subscription:
    hub: EventHub
    response_id: str
    durable: bool
    # Batches as they are published (a Notice for one too large to travel), and Idle when nothing
    # came for the hub's idle period, waiting for the follower to take them.
    waiting: deque[list[WireEvent] | Notice | Idle] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    quiet_ticks: int = 0

    def deliver(self, item: list[WireEvent] | Notice | Idle) -> None:
        self.waiting.append(item)
        self.arrived.set()

    async def next_batch(self) -> list[WireEvent] | Notice | Idle:
        """The next batch of live events (or the notice of one), or Idle after an idle period. A
        follower that fell behind (a busy process) gets the batches waiting for it as one, so it
        writes to its client once for all of them: the busier the process, the fewer its writes."""
        while not self.waiting:
            self.arrived.clear()
            await self.arrived.wait()
        item = self.waiting.popleft()
        if not isinstance(item, list):
            return item
        merged = item
        while (
            self.waiting
            and isinstance(following := self.waiting[0], list)
            and following[0].sequence_number == merged[-1].sequence_number + 1  # (a gap is seen on its own)
        ):
            merged = merged + following
            self.waiting.popleft()
        return merged

    async def close(self) -> None:
        self.hub._leave(self)


class EventHub:
    """`idle_seconds`: a follower that received nothing this long is told so (Idle), to keep its
    connection alive and make sure it missed no message. One clock for all followers: a timer
    per wait was, with hundreds of streams, a tenth of an API process's CPU. And one query per
    tick for all the durable responses whose followers are idle (`engine`): a query per
    follower was, with thousands of them, more than Postgres and the pool could answer."""

    IDLE_TICKS = 4  # a follower is told after one to one and a quarter idle periods of quiet

    def __init__(self, redis: Redis, channel: str, idle_seconds: float, engine: AsyncEngine | None = None) -> None:
        self._redis = redis
        self._engine = engine
        self._channel = channel
        self._tick_seconds = idle_seconds / self.IDLE_TICKS
        self._followers: dict[str, set[Subscription]] = {}
        self._subscribed = asyncio.Event()  # Redis confirmed the channel on the current connection
        self._lost = False  # the subscription broke, and is not back yet
        self._side_tasks = SideTasks()
        self._idle_check_failure = RepeatedFailure("the event hub's check of its idle followers' responses", log)

    async def start(self) -> None:
        self._side_tasks.start("event-hub", self._read)
        self._side_tasks.start("event-hub-idle", self._watch_idle)

    async def close(self) -> None:
        await self._side_tasks.close()

    @property
    def subscribed(self) -> bool:
        """Whether Redis confirmed the events channel: no event published from now on is missed."""
        return self._subscribed.is_set()

    @property
    def followers(self) -> int:
        """Streams and JSON answers following a response in this process now."""
        return sum(len(followers) for followers in self._followers.values())

    async def subscribe(self, response_id: str, durable: bool) -> Subscription:
        """Events published from now on; 503 while the events channel is not subscribed."""
        subscription = Subscription(self, response_id, durable)
        self._followers.setdefault(response_id, set()).add(subscription)
        if not self._subscribed.is_set():
            try:
                if self._lost:  # no waiting while Redis is known to be away
                    raise TimeoutError
                async with asyncio.timeout(SUBSCRIBE_TIMEOUT_SECONDS):
                    await self._subscribed.wait()
            except TimeoutError as exc:
                self._leave(subscription)
                raise errors.ServiceUnavailable("The event bus (Redis) is unavailable; please retry.") from exc
        return subscription

    def _leave(self, subscription: Subscription) -> None:
        followers = self._followers.get(subscription.response_id)
        if followers is None:
            return
        followers.discard(subscription)
        if not followers:
            del self._followers[subscription.response_id]

    async def _read(self) -> None:
        await listen_for_ever(
            self._redis, self._channel, self._dispatch, on_subscribed=self._on_subscribed, on_lost=self._on_lost
        )

    def _on_subscribed(self) -> None:
        self._lost = False
        self._subscribed.set()

    def _on_lost(self) -> None:
        # Followers fall back to reading Postgres while Redis is away.
        self._lost = True
        self._subscribed.clear()

    async def _dispatch(self, message: bytes) -> None:
        try:
            committed = list(decode_message(message, self._followers))
        except (ValueError, UnicodeDecodeError):  # not ours: followers lose nothing they cannot re-read
            log.warning("ignored a malformed message on %s: %r", self._channel, message[:200])
            return
        for response_id, batch in committed:
            for subscription in self._followers[response_id]:
                subscription.quiet_ticks = 0
                subscription.deliver(batch)

    async def _watch_idle(self) -> None:
        while True:
            await asyncio.sleep(self._tick_seconds)
            due = []
            for followers in self._followers.values():
                for subscription in followers:
                    subscription.quiet_ticks += 1
                    if subscription.quiet_ticks > self.IDLE_TICKS:
                        subscription.quiet_ticks = 0
                        due.append(subscription)
            if due:
                await self._tell_idle(due)

    async def _tell_idle(self, due: list[Subscription]) -> None:
        states = await self._log_states({s.response_id for s in due if s.durable})
        for subscription in due:
            if not subscription.waiting:  # (events came meanwhile: it is not idle)
                state = states.get(subscription.response_id) if subscription.durable else None
                subscription.deliver(Idle(state))

    async def _log_states(self, response_ids: set[str]) -> dict[str, LogState]:
        if not response_ids or self._engine is None:
            return {}
        try:
            async with self._engine.connect() as conn:
                ends = await events_db.log_ends(conn, list(response_ids))
        except Exception:  # each follower checks for itself (and meets the failure itself)
            self._idle_check_failure.failed()
            return {}
        self._idle_check_failure.succeeded()
        return {rid: LogState(status in TERMINAL_STATUSES, last) for rid, (status, last) in ends.items()}

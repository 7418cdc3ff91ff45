"""One Redis pub/sub connection per API process, fanned out to every follower in it.

Followers of the same response share one subscription; a follower's `Subscription` is ready
only once Redis confirmed it, so a follower that subscribes and then reads Postgres misses
nothing in between. This is a cache of live signals, not state: any replica can follow any
response (design invariant 7).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from app import errors
from app.redis_keys import EVENTS_CHANNEL_PREFIX, events_channel
from app.streaming.wire import WireEvent, decode_batch

log = logging.getLogger(__name__)

SUBSCRIBE_TIMEOUT_SECONDS = 5.0
_IDLE_CHANNEL = "responses:hub"  # keeps the connection subscribed (and readable) with no followers


@dataclass(eq=False)
class Subscription:
    hub: EventHub
    channel: str
    # Batches as they are published; None when nothing came for the hub's idle period.
    queue: asyncio.Queue[list[WireEvent] | None] = field(default_factory=asyncio.Queue)
    quiet_ticks: int = 0

    async def next_batch(self) -> list[WireEvent] | None:
        """The next batch of live events, or None after an idle period."""
        return await self.queue.get()

    async def close(self) -> None:
        await self.hub._leave(self)


class EventHub:
    """`idle_seconds`: a follower that received nothing this long is told so (None), to
    re-check Postgres and keep its connection alive. One clock for all followers: a timer per
    wait was, with hundreds of streams, a tenth of an API process's CPU."""

    IDLE_TICKS = 4  # a follower is told after one to one and a quarter idle periods of quiet

    def __init__(self, redis: Redis, idle_seconds: float) -> None:
        self._redis = redis
        self._tick_seconds = idle_seconds / self.IDLE_TICKS
        self._pubsub: PubSub | None = None
        self._opening = asyncio.Lock()
        self._followers: dict[str, set[Subscription]] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        try:
            await self._connection()  # before the reader starts, which would otherwise race to open it
        except Exception:
            log.warning("event hub cannot reach Redis yet; it keeps trying", exc_info=True)
        self._tasks = [
            asyncio.create_task(self._read(), name="event-hub"),
            asyncio.create_task(self._watch_idle(), name="event-hub-idle"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._pubsub:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]

    async def subscribe(self, response_id: str) -> Subscription:
        channel = events_channel(response_id)
        subscription = Subscription(self, channel)
        followers = self._followers.setdefault(channel, set())
        followers.add(subscription)
        try:
            if len(followers) == 1:
                self._confirmed[channel] = asyncio.get_running_loop().create_future()
                await (await self._connection()).subscribe(channel)
            await asyncio.wait_for(asyncio.shield(self._confirmed[channel]), SUBSCRIBE_TIMEOUT_SECONDS)
        except Exception as exc:
            await self._leave(subscription)
            raise errors.ServiceUnavailable("The event bus (Redis) is unavailable; please retry.") from exc
        return subscription

    async def _leave(self, subscription: Subscription) -> None:
        followers = self._followers.get(subscription.channel)
        if followers is None or subscription not in followers:
            return
        followers.discard(subscription)
        if not followers:
            del self._followers[subscription.channel]
            self._confirmed.pop(subscription.channel, None)
            try:
                await (await self._connection()).unsubscribe(subscription.channel)
            except Exception:
                log.warning("could not unsubscribe %s", subscription.channel, exc_info=True)

    async def _connection(self) -> PubSub:
        if self._pubsub is not None:
            return self._pubsub
        async with self._opening:  # one connection, however many callers find none
            if self._pubsub is None:
                pubsub = self._redis.pubsub()
                await pubsub.subscribe(_IDLE_CHANNEL)
                self._pubsub = pubsub
            return self._pubsub

    async def _read(self) -> None:
        while True:
            try:
                pubsub = await self._connection()
                # listen(), not get_message(timeout=…): no timeout to arm and disarm per message
                # (it stays subscribed to the idle channel, so it never runs dry).
                async for message in pubsub.listen():
                    self._dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Followers fall back to reading Postgres while Redis is away.
                log.warning("event hub lost Redis; reconnecting", exc_info=True)
            # Also when listen() ran dry: the idle channel's subscription was still on its way.
            await asyncio.sleep(0.5)

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = message["channel"].decode()
        if not channel.startswith(EVENTS_CHANNEL_PREFIX):
            return
        if message["type"] == "subscribe":
            confirmed = self._confirmed.get(channel)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
        elif message["type"] == "message":
            batch = decode_batch(message["data"])
            for subscription in self._followers.get(channel, ()):
                subscription.quiet_ticks = 0
                subscription.queue.put_nowait(batch)

    async def _watch_idle(self) -> None:
        while True:
            await asyncio.sleep(self._tick_seconds)
            for followers in self._followers.values():
                for subscription in followers:
                    subscription.quiet_ticks += 1
                    if subscription.quiet_ticks > self.IDLE_TICKS:
                        subscription.quiet_ticks = 0
                        if subscription.queue.empty():
                            subscription.queue.put_nowait(None)

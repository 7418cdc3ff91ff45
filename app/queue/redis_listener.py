"""A Redis pub/sub subscription that outlives Redis outages: every subscriber of the service (the
API's event hub, a worker's wake-up and stop listeners) listens through `listen_for_ever`.

It subscribes on a connection of its own, hands each message on, and when Redis goes away it
reports the outage (app/queue/redis_link.py) and subscribes again with backoff until Redis is back.
Messages published while it was away are gone (pub/sub keeps none): each subscriber has its own
way to catch up (the event log, the queue's poll, the lease keeper's read of stop requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from app.queue.redis_link import REDIS_DOWN, REDIS_LINK, Backoff


async def listen_for_ever(
    redis: Redis,
    channel: str,
    on_message: Callable[[bytes], Awaitable[None]],
    *,
    on_subscribed: Callable[[], None] = lambda: None,
    on_lost: Callable[[], None] = lambda: None,
) -> None:
    """Runs until cancelled. `on_subscribed`: Redis confirmed the subscription (from then on no
    message is missed); `on_lost`: the subscription broke (messages may be missed until the
    next `on_subscribed`)."""
    backoff = Backoff()
    while True:
        try:
            async with redis.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                # listen(), not get_message(timeout=…): no timer to arm and disarm per message.
                async for message in pubsub.listen():
                    if message["type"] == "message":
                        await on_message(message["data"])
                    elif message["type"] == "subscribe":
                        REDIS_LINK.answered()
                        backoff.reset()
                        on_subscribed()
        except REDIS_DOWN as error:
            REDIS_LINK.failed(f"subscription to {channel}", error)
        on_lost()
        await asyncio.sleep(backoff.next())

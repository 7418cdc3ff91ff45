"""The events of store=false responses that Redis could not take, held until it is back.

A transient (foreground store=false) response's events exist only in its worker and on Redis:
an event that cannot be published during an outage would be lost to its follower. So the event
writer holds them here, in order, and publishes them once Redis answers again; a response with
events held has its later events held behind them, so that none overtakes another.

Held events are published through overflow keys (app/events/channel.py) with a notice on the channel: an
API process that has not subscribed again yet misses the notice, and its follower finds the
events in the keys at its next gap or idle check. For the same reason every transient response's
events go through overflow keys for a while after an outage ends (`spill`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence

from redis.asyncio import Redis

from app.events import channel as events_channel
from app.protocol.encoding import WireEvent
from app.queue.redis_keys import OVERFLOW_TTL_SECONDS
from app.queue.redis_link import REDIS_LINK

log = logging.getLogger(__name__)

# API processes subscribe again within their backoff (2 s at most) once Redis is back.
SPILL_AFTER_OUTAGE_SECONDS = 5.0
# Past this, no follower is waiting any more (they wait RESPONSES_REDIS_OUTAGE_SECONDS).
KEEP_SECONDS = float(OVERFLOW_TTL_SECONDS)


class TransientBacklog:
    def __init__(self) -> None:
        self._held: dict[str, list[WireEvent]] = {}
        self._since: dict[str, float] = {}
        self.waiting = asyncio.Event()  # set while events are held

    def __contains__(self, response_id: str) -> bool:
        return response_id in self._held

    def hold_behind(self, to_publish: dict[str, list[WireEvent]]) -> None:
        """Takes out of `to_publish` the events of responses that have events held: they go after them."""
        for response_id in self._held.keys() & to_publish.keys():
            self._held[response_id] += to_publish.pop(response_id)

    def hold(self, events: Mapping[str, Sequence[WireEvent]]) -> None:
        now = time.monotonic()
        for response_id, held in events.items():
            self._held.setdefault(response_id, []).extend(held)
            self._since.setdefault(response_id, now)
        if self._held:
            self.waiting.set()

    @staticmethod
    def spill(transient: Collection[str]) -> Collection[str]:
        """The transient responses whose events go through overflow keys now: all of them, for a
        while after an outage."""
        return transient if REDIS_LINK.up_for < SPILL_AFTER_OUTAGE_SECONDS else ()

    async def publish(self, redis: Redis, channel: str) -> bool:
        """Publishes every held event (through overflow keys); False while Redis is still away."""
        now = time.monotonic()
        for response_id in [rid for rid, since in self._since.items() if now - since > KEEP_SECONDS]:
            log.warning("response %s: its held events waited past %.0fs for Redis; dropped", response_id, KEEP_SECONDS)
            self._forget(response_id)
        held = set(self._held)
        if held and not await events_channel.publish(redis, channel, self._held, transient=held, spill=held):
            return False
        for response_id in held:
            self._forget(response_id)
        self.waiting.clear()
        return True

    def _forget(self, response_id: str) -> None:
        del self._held[response_id], self._since[response_id]

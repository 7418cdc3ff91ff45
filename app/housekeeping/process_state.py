"""What every process of the service holds, API or worker: its settings and catalog, two pools of
Postgres connections (one for requests, one of held connections: app/storage/held.py), the
Redis client the queue shares, the seal, its side tasks, and the loops each runs beside its work
(webhook delivery, the reaper). `AppState` (app/service/state.py) and `WorkerState`
(workers/state.py) are this and what their process adds."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.housekeeping import reaper
from app.housekeeping.webhook_delivery import WebhookDeliverer
from app.process.side_tasks import SideTasks
from app.protocol.sealing import Seal
from app.queue import heartbeats
from app.queue.jobs import QueueRedis
from app.queue.redis_keys import events_channel
from app.queue.redis_link import REDIS_LINK
from app.settings import Settings
from app.storage.engine import create_engine


def open_engines(settings: Settings, held_connections: int) -> tuple[AsyncEngine, AsyncEngine]:
    """The pool requests (or jobs) take connections from, and the pool of `held_connections`."""
    held = create_engine(settings, pool_size=held_connections, max_overflow=0, generic_plans=True)
    return create_engine(settings), held


@dataclass
class ProcessState:
    settings: Settings
    catalog: Catalog
    engine: AsyncEngine
    held_engine: AsyncEngine
    redis: QueueRedis

    def __post_init__(self) -> None:
        self.seal = Seal.from_config(self.settings.encryption_keys, self.settings.encryption_key_file)
        self.side_tasks = SideTasks()
        self.webhooks = WebhookDeliverer(self.settings)
        self.events_channel = events_channel(self.settings.queue_name)
        self.workers_seen: set[str] = set()  # the workers whose heartbeats the reaps saw
        self._missing_since: dict[str, float] = {}  # those whose heartbeats went, since when
        self.continuations = reaper.Continuations(
            self.catalog, self.settings.queue_name, self.settings.max_continuations
        )

    def start(self) -> None:
        self.side_tasks.start("webhooks", self.webhooks.run)

    async def reap(self, spare: Collection[str] = ()) -> None:
        """Takes up the running responses whose worker died (app/housekeeping/reaper.py), but those
        in `spare`; and removes the store=false jobs of the workers whose heartbeats went since
        the last time."""
        await reaper.reap_expired_leases(self.engine, self.redis, self.events_channel, self.continuations, spare)
        with REDIS_LINK.tolerated("removing dead workers' store=false jobs"):
            gone = self._workers_gone({beat["worker_id"] for beat in await heartbeats.workers_alive(self.redis)})
            if gone:
                base = self.settings.queue_name
                await reaper.remove_dead_workers_transient_jobs(self.redis, self.catalog, base, gone)

    def _workers_gone(self, alive: set[str]) -> set[str]:
        """The workers seen before whose heartbeats have been missing for a few housekeeping
        periods and a lease: not a heartbeat that a Redis failover lost and the next beat restores
        (nor a store=false response's alive key, which its lease keeper sets again)."""
        now = time.monotonic()
        for worker in self.workers_seen - alive:
            self._missing_since.setdefault(worker, now)
        patience = 3 * self.settings.housekeeping_seconds + self.settings.lease_seconds
        gone = {worker for worker, since in self._missing_since.items() if now - since >= patience}
        self.workers_seen = alive | (set(self._missing_since) - gone)
        self._missing_since = {w: since for w, since in self._missing_since.items() if w not in gone and w not in alive}
        return gone

    async def stop_loops(self) -> None:
        """First at a close: nothing runs on behind what the process closes next."""
        await self.side_tasks.close()
        await self.webhooks.close()

    async def dispose_engines(self) -> None:
        """Last at a close, once nothing uses a connection. (The Redis client is the process's to
        close: a worker's is arq's.)"""
        await self.engine.dispose()
        await self.held_engine.dispose()

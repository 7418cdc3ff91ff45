"""What every process of the service holds, API or worker: its settings and catalog, two pools of
Postgres connections (one for requests, one of held connections: app/storage/held.py), the
Redis client the queue shares, the seal, its side tasks, and the loops each runs beside its work
(webhook delivery, the reaper). `AppState` (app/service/state.py) and `WorkerState`
(workers/state.py) are this and what their process adds."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.housekeeping import reaper
from app.housekeeping.webhook_delivery import WebhookDeliverer
from app.process.side_tasks import SideTasks
from app.protocol.sealing import Seal
from app.queue.jobs import QueueRedis
from app.queue.redis_keys import events_channel
from app.settings import Settings
from app.storage.engine import create_engine


def open_engines(settings: Settings, held_connections: int) -> tuple[AsyncEngine, AsyncEngine]:
    """The pool requests (or jobs) take connections from, and the pool of `held_connections`."""
    return create_engine(settings), create_engine(settings, pool_size=held_connections, max_overflow=0)


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
        self.continuations = reaper.Continuations(
            self.catalog, self.settings.queue_name, self.settings.max_continuations
        )

    def start(self) -> None:
        self.side_tasks.start("webhooks", self.webhooks.run)

    async def reap(self, spare: Collection[str] = ()) -> None:
        """Takes up the running responses whose worker died (app/housekeeping/reaper.py), but those
        in `spare`."""
        await reaper.reap_expired_leases(self.engine, self.redis, self.events_channel, self.continuations, spare)

    async def stop_loops(self) -> None:
        """First at a close: nothing runs on behind what the process closes next."""
        await self.side_tasks.close()
        await self.webhooks.close()

    async def dispose_engines(self) -> None:
        """Last at a close, once nothing uses a connection. (The Redis client is the process's to
        close: a worker's is arq's.)"""
        await self.engine.dispose()
        await self.held_engine.dispose()

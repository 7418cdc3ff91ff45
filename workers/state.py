"""What a worker process holds (`WorkerState`, in arq's ctx as "state"): its connections, the
event writer, the runtime client, the generations running, and the side tasks that keep them."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from dataclasses import dataclass, field

from arq.connections import ArqRedis
from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog, OpenAIModel
from app.process.batching import Batched
from app.process.side_tasks import SideTasks
from app.protocol.reasoning_seal import ReasoningSeal
from app.queue.redis_keys import STOP_CHANNEL, WORKER_PREFIX, events_channel
from app.queue.redis_link import REDIS_LINK
from app.queue.redis_listener import listen_for_ever
from app.service import reaper
from app.settings import Settings
from app.storage import responses as responses_db
from app.storage.engine import create_engine
from app.storage.held import HeldConnection
from workers import retention
from workers.event_log.writer import EventWriter
from workers.leases import LeaseKeeper
from workers.runtimes.client import ChatRuntimeClient
from workers.runtimes.supervisor import RuntimeSupervisor

log = logging.getLogger(__name__)


@dataclass
class WorkerState:
    settings: Settings
    catalog: Catalog
    engine: AsyncEngine
    redis: ArqRedis  # arq's own pool: the queue, pub/sub and keys
    writer: EventWriter
    runtime: ChatRuntimeClient
    # The model server this worker started and keeps running (a `worker --model` only).
    supervisor: RuntimeSupervisor | None = None
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    # Generations running in this process, by response id: what a stop signal cancels.
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # The store=false ones among them: kept alive by a Redis key instead of a Postgres lease.
    transient: set[str] = field(default_factory=set)
    # Claims of the jobs starting together, made by one statement.
    claims: Batched[str, responses_db.Claim] = field(init=False)
    side_tasks: SideTasks = field(default_factory=SideTasks)

    def __post_init__(self) -> None:
        self.seal = ReasoningSeal.from_config(self.settings.encryption_keys, self.settings.encryption_key_file)
        self.claims = Batched(self._claim_many, "claims")
        self.claim_connection = HeldConnection(self.engine)
        # A generation whose events can no longer be written (refused, or its response ended
        # elsewhere) stops reading its runtime at once.
        self.writer.on_dropped = self.stop_generation
        self.lease_keeper = LeaseKeeper(self.settings, self.worker_id, self._running_now, self.stop_generation)

    async def _claim_many(self, response_ids: list[str]) -> dict[str, responses_db.Claim]:
        async with self.claim_connection.use() as conn:  # one atomic claim, then the contexts
            return await responses_db.claim_many(conn, response_ids, self.worker_id, self.settings.lease_seconds)

    @classmethod
    def open(
        cls, settings: Settings, redis: ArqRedis, catalog: Catalog, supervisor: RuntimeSupervisor | None = None
    ) -> WorkerState:
        engine = create_engine(settings)
        return cls(
            settings=settings,
            catalog=catalog,
            supervisor=supervisor,
            engine=engine,
            redis=redis,
            writer=EventWriter(engine, redis, events_channel(settings.queue_name)),
            runtime=ChatRuntimeClient(settings.runtime_connect_timeout, settings.runtime_read_timeout),
        )

    def start(self) -> None:
        self.writer.start()
        self.lease_keeper.start()
        self.side_tasks.start("stop-listener", self._listen_for_stops)
        self.side_tasks.start_every("housekeeping", self.settings.housekeeping_seconds, self._housekeeping)
        self.side_tasks.start_every("retention", self.settings.retention_interval_seconds, self._retention)

    async def close(self) -> None:
        await self.side_tasks.close()
        try:
            await self.redis.delete(WORKER_PREFIX + self.worker_id)
        except Exception:  # it expires anyway
            log.warning("could not remove this worker's heartbeat", exc_info=True)
        await self.lease_keeper.close()
        await self.writer.close()
        await self.claim_connection.close()
        await self.runtime.aclose()
        await self.engine.dispose()
        if self.supervisor is not None:  # last: generations have ended by now
            await self.supervisor.shut_down()

    def stop_generation(self, response_id: str) -> None:
        task = self.running.get(response_id)
        if task is not None:
            task.cancel()

    async def _listen_for_stops(self) -> None:
        # Stops missed while Redis is away are not lost: the lease keeper reads them from Postgres.
        async def stop(response_id: bytes) -> None:
            self.stop_generation(response_id.decode())

        await listen_for_ever(self.redis, STOP_CHANNEL, stop)

    def _running_now(self) -> tuple[frozenset[str], frozenset[str]]:
        """The durable and the transient generations running now; called from the lease keeper's
        thread, so it only copies."""
        transient = frozenset(self.transient)
        return frozenset(self.running) - transient, transient

    async def _retention(self) -> None:
        policy = retention.RetentionPolicy.from_settings(self.settings)
        await retention.apply(self.engine, policy, report_every=self.settings.retention_interval_seconds)

    def heartbeat(self) -> dict[str, object]:
        """What `responses-server status` shows of this worker."""
        hosted = self.supervisor.name if self.supervisor is not None else None
        runtime = None if self.supervisor is None else "ok" if self.supervisor.healthy else "restarting"
        serves = [hosted] if hosted else [e.id for e in self.catalog.entries if isinstance(e, OpenAIModel)]
        return {
            "worker_id": self.worker_id,
            "models": serves,
            "running": len(self.running),
            "max_jobs": self.settings.worker_max_jobs,
            "runtime": runtime,
        }

    async def _housekeeping(self) -> None:
        with REDIS_LINK.tolerated("worker heartbeat"):
            await self.redis.set(
                WORKER_PREFIX + self.worker_id,
                json.dumps(self.heartbeat()),
                ex=max(15, int(3 * self.settings.housekeeping_seconds)),
            )
        channel = events_channel(self.settings.queue_name)
        await reaper.reap_expired_leases(self.engine, self.redis, channel, spare=frozenset(self.running))
        with REDIS_LINK.tolerated("requeue"):
            await reaper.requeue_lost_jobs(
                self.engine, self.redis, self.catalog, self.settings.queue_name, self.settings.requeue_after_seconds
            )

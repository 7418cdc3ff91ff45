"""What a worker process holds: one typed object in arq's ctx instead of loose keys."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field

from arq.connections import ArqRedis
from sqlalchemy.ext.asyncio import AsyncEngine

from app.batching import Batched
from app.catalog import Catalog
from app.db import responses as responses_db
from app.db.engine import create_engine
from app.db.held import HeldConnection
from app.reasoning_seal import ReasoningSeal
from app.redis_keys import ALIVE_PREFIX, STOP_CHANNEL, events_channel
from app.settings import Settings
from workers import reaper, retention
from workers.event_log import EventWriter
from workers.runtime import ChatRuntimeClient
from workers.supervisor import RuntimeSupervisor

log = logging.getLogger(__name__)


@dataclass
class WorkerDeps:
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
    ephemeral: set[str] = field(default_factory=set)
    # Claims of the jobs starting together, made by one statement.
    claims: Batched[str, responses_db.Claim] = field(init=False)
    _background: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seal = ReasoningSeal.from_config(self.settings.encryption_keys, self.settings.encryption_key_file)
        self.claims = Batched(self._claim_many, "claims")
        self.claim_connection = HeldConnection(self.engine)
        self.writer.on_refused = self.stop_generation

    async def _claim_many(self, response_ids: list[str]) -> dict[str, responses_db.Claim]:
        async with self.claim_connection.use() as conn:  # one atomic statement
            return await responses_db.claim_many(conn, response_ids, self.worker_id, self.settings.lease_seconds)

    @classmethod
    def open(
        cls, settings: Settings, redis: ArqRedis, catalog: Catalog, supervisor: RuntimeSupervisor | None = None
    ) -> WorkerDeps:
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
        self._background += [
            asyncio.create_task(self._listen_for_stops(), name="stop-listener"),
            asyncio.create_task(self._keep_leases(), name="lease-keeper"),
            asyncio.create_task(self._housekeeping(), name="housekeeping"),
            asyncio.create_task(self._retention(), name="retention"),
        ]

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        await self.writer.close()
        await self.claim_connection.close()
        await self.runtime.aclose()
        await self.engine.dispose()
        if self.supervisor is not None:  # last: generations have ended by now
            await self.supervisor.stop()

    def stop_generation(self, response_id: str) -> None:
        task = self.running.get(response_id)
        if task is not None:
            task.cancel()

    async def _listen_for_stops(self) -> None:
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(STOP_CHANNEL)
                    async for message in pubsub.listen():
                        if message["type"] == "message":
                            self.stop_generation(message["data"].decode())
            except Exception:
                # The lease keeper also sees stop requests (from Postgres), so a Redis outage only delays them.
                log.warning("stop listener lost Redis; reconnecting", exc_info=True)
                await asyncio.sleep(1.0)

    async def _keep_leases(self) -> None:
        interval = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            if not self.running:
                continue
            try:
                for response_id in list(self.ephemeral):
                    await self.redis.expire(ALIVE_PREFIX + response_id, int(self.settings.lease_seconds) + 1)
                async with self.engine.begin() as conn:
                    stops = await responses_db.renew_leases(conn, list(self.running), self.settings.lease_seconds)
                for response_id in stops:
                    self.stop_generation(response_id)
            except Exception:
                log.warning("could not renew leases", exc_info=True)

    async def _retention(self) -> None:
        policy = retention.RetentionPolicy.from_settings(self.settings)
        while True:
            await asyncio.sleep(self.settings.retention_interval_seconds)
            try:
                await retention.apply(self.engine, policy)
            except Exception:
                log.warning("retention failed; will retry", exc_info=True)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.settings.housekeeping_seconds)
            try:
                await reaper.reap_expired_leases(self.engine, self.redis, events_channel(self.settings.queue_name))
                await reaper.requeue_lost_jobs(
                    self.engine, self.redis, self.catalog, self.settings.queue_name, self.settings.requeue_after_seconds
                )
            except Exception:
                log.warning("housekeeping failed; will retry", exc_info=True)

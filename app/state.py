"""What an API process holds, opened by the lifespan and closed with it."""

from __future__ import annotations

from dataclasses import dataclass

from arq.connections import ArqRedis, RedisSettings, create_pool
from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.db.engine import create_engine
from app.queue import job_deserializer, job_serializer
from app.redis_keys import events_channel
from app.settings import Settings
from app.streaming.follow import LogSource
from app.streaming.hub import EventHub


@dataclass
class AppState:
    settings: Settings
    catalog: Catalog
    engine: AsyncEngine
    redis: ArqRedis  # the arq pool is a Redis client too: queue, pub/sub and keys share it
    hub: EventHub

    @classmethod
    async def open(cls, settings: Settings) -> AppState:
        redis = await create_pool(
            RedisSettings.from_dsn(settings.redis_url),
            job_serializer=job_serializer,
            job_deserializer=job_deserializer,
            default_queue_name=settings.queue_name,
        )
        hub = EventHub(redis, events_channel(settings.queue_name), settings.follow_idle_seconds)
        await hub.start()
        return cls(settings, Catalog.load(settings.models_path), create_engine(settings), redis, hub)

    async def close(self) -> None:
        await self.hub.close()
        await self.redis.aclose()
        await self.engine.dispose()

    def log_source(self, persisted: bool) -> LogSource:
        return LogSource(self.engine, self.redis, persisted)

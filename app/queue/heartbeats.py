"""The workers' heartbeats in Redis: each worker's housekeeping writes what it serves and runs
(`responses-server status` shows them), and a worker shutting down reads them to know whether
another worker of its queue is alive to take its generations over."""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from app.queue.redis_keys import QUEUE_WORKERS_PREFIX, WORKER_PREFIX


async def beat(redis: Redis, worker_id: str, heartbeat: dict[str, Any], ttl_seconds: int) -> None:
    """The worker's heartbeat, and its place among the workers of its queue (`heartbeat["queue"]`)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(WORKER_PREFIX + worker_id, json.dumps(heartbeat), ex=ttl_seconds)
        if heartbeat.get("queue"):
            pipe.sadd(QUEUE_WORKERS_PREFIX + str(heartbeat["queue"]), worker_id)
        await pipe.execute()


async def stop_beating(redis: Redis, worker_id: str, queue_name: str) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(WORKER_PREFIX + worker_id)
        pipe.srem(QUEUE_WORKERS_PREFIX + queue_name, worker_id)
        await pipe.execute()


async def workers_alive(redis: Redis) -> list[dict[str, Any]]:
    keys = [key async for key in redis.scan_iter(match=WORKER_PREFIX + "*", count=1000)]
    beats = await redis.mget(keys) if keys else []
    return sorted((json.loads(beat) for beat in beats if beat), key=lambda beat: str(beat["worker_id"]))


async def others_taking(redis: Redis, queue_name: str, worker_id: str) -> bool:
    """Whether a worker other than `worker_id` takes jobs from `queue_name` (alive, not shutting down)."""
    return any(
        beat.get("queue") == queue_name and beat["worker_id"] != worker_id and not beat.get("draining")
        for beat in await workers_alive(redis)
    )

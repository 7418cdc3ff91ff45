"""The work queue as the API sees it: enqueue `generate` by name (app never imports workers),
and signal running generations to stop."""

from __future__ import annotations

import json
from typing import Any

from arq.connections import ArqRedis
from redis.exceptions import RedisError

from app import errors
from app.redis_keys import EPHEMERAL_CLAIM_PREFIX, GENERATE_JOB, STOP_CHANNEL, wake_channel


def job_serializer(job: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a job in Redis must never be able to run code.
    return json.dumps(job).encode()


def job_deserializer(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(data)
    return result


async def enqueue_generate(
    queue: ArqRedis, response_id: str, queue_name: str, ephemeral: dict[str, Any] | None = None
) -> None:
    """Enqueues with the response id as job id: enqueueing the same response twice is one job."""
    args: tuple[Any, ...] = (response_id,) if ephemeral is None else (response_id, ephemeral)
    try:
        await queue.enqueue_job(GENERATE_JOB, *args, _job_id=response_id, _queue_name=queue_name)
        await queue.publish(wake_channel(queue_name), response_id)
    except (RedisError, OSError) as exc:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from exc


async def signal_stop(queue: ArqRedis, response_id: str, persisted: bool) -> None:
    """Tells whichever worker runs the response to stop. A store=false response not yet taken
    is pre-empted by taking its claim first; a stored one is also flagged in Postgres, which
    the worker's lease keeper reads should this message be lost."""
    try:
        if not persisted and await queue.set(EPHEMERAL_CLAIM_PREFIX + response_id, "stopped", nx=True, ex=3600):
            return
        await queue.publish(STOP_CHANNEL, response_id)
    except (RedisError, OSError):
        pass

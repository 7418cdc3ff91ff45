"""The work queue as the API sees it: enqueue `generate` by name (app never imports workers),
and signal running generations to stop."""

from __future__ import annotations

import json
from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from redis.exceptions import RedisError

from app import errors
from app.redis_keys import EPHEMERAL_CLAIM_PREFIX, GENERATE_JOB, STOP_CHANNEL, wake_channel


def job_serializer(job: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a job in Redis must never be able to run code.
    return json.dumps(job).encode()


def job_deserializer(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(data)
    return result


# arq's enqueue (WATCH, EXISTS, MULTI/EXEC: three round trips) and our wake-up, as one script:
# the job is stored exactly as arq.connections.ArqRedis.enqueue_job stores it (same keys, same
# serialized job), unless a job or result with this id exists, and workers are woken at once.
_ENQUEUE = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('PUBLISH', KEYS[4], ARGV[4])
return 1
"""
_JOB_EXPIRY_MS = 86_400_000  # arq's default expires_extra_ms: an unstarted job lives a day


async def enqueue_generate(
    queue: ArqRedis, response_id: str, queue_name: str, ephemeral: dict[str, Any] | None = None
) -> bool:
    """Enqueues with the response id as job id, so enqueueing the same response twice is one job;
    returns whether it was new."""
    args: tuple[Any, ...] = (response_id,) if ephemeral is None else (response_id, ephemeral)
    now = timestamp_ms()
    job = serialize_job(GENERATE_JOB, args, {}, None, now, serializer=job_serializer)
    keys = [job_key_prefix + response_id, result_key_prefix + response_id, queue_name, wake_channel(queue_name)]
    try:
        added = await queue.register_script(_ENQUEUE)(keys=keys, args=[_JOB_EXPIRY_MS, job, now, response_id])
    except (RedisError, OSError) as exc:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from exc
    return bool(added)


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

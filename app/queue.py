"""The work queue as the API sees it: enqueue `generate` by name (app never imports workers),
and signal running generations to stop."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
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


# arq's enqueue (WATCH, EXISTS, MULTI/EXEC: three round trips per job) and our wake-up, as one
# script for any number of jobs of one queue: each job is stored exactly as
# arq.connections.ArqRedis.enqueue_job stores it (same keys, same serialized job), unless a job
# or result with its id exists, and workers are woken at once by one message naming the new
# jobs. KEYS[1]: the queue, KEYS[2]: its wake-up channel; ARGV: expiry (ms), now (ms), arq's job
# and result key prefixes, then each job's id and serialized job. Returns 1/0 per job: added.
_ENQUEUE = """
local added, ids = {}, {}
for i = 5, #ARGV, 2 do
    local id = ARGV[i]
    if redis.call('EXISTS', ARGV[3] .. id, ARGV[4] .. id) > 0 then
        table.insert(added, 0)
    else
        redis.call('PSETEX', ARGV[3] .. id, ARGV[1], ARGV[i + 1])
        redis.call('ZADD', KEYS[1], ARGV[2], id)
        table.insert(added, 1)
        table.insert(ids, id)
    end
end
if #ids > 0 then redis.call('PUBLISH', KEYS[2], table.concat(ids, ' ')) end
return added
"""
_JOB_EXPIRY_MS = 86_400_000  # arq's default expires_extra_ms: an unstarted job lives a day


@dataclass(frozen=True, slots=True)
class GenerateJob:
    """A `generate` job for one response on one queue; its job id is the response id."""

    response_id: str
    queue_name: str
    ephemeral: str | None = None  # a store=false response's request, as JSON: the job carries it

    @classmethod
    def of(cls, response_id: str, queue_name: str, ephemeral: dict[str, Any] | None = None) -> GenerateJob:
        return cls(response_id, queue_name, None if ephemeral is None else json.dumps(ephemeral))

    def serialized(self, now: int) -> bytes:
        args = (self.response_id,) if self.ephemeral is None else (self.response_id, json.loads(self.ephemeral))
        return serialize_job(GENERATE_JOB, args, {}, None, now, serializer=job_serializer)


async def enqueue_generate(
    queue: ArqRedis, response_id: str, queue_name: str, ephemeral: dict[str, Any] | None = None
) -> bool:
    """Enqueues with the response id as job id, so enqueueing the same response twice is one job;
    returns whether it was new."""
    job = GenerateJob.of(response_id, queue_name, ephemeral)
    return (await enqueue_many(queue, [job]))[job]


async def enqueue_many(queue: ArqRedis, jobs: Sequence[GenerateJob]) -> dict[GenerateJob, bool]:
    """`enqueue_generate` for many jobs: one script call per queue."""
    now = timestamp_ms()
    added: dict[GenerateJob, bool] = {}
    by_queue: dict[str, list[GenerateJob]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue_name, []).append(job)
    script = queue.register_script(_ENQUEUE)
    try:
        for queue_name, queued in by_queue.items():
            args: list[Any] = [_JOB_EXPIRY_MS, now, job_key_prefix, result_key_prefix]
            for job in queued:
                args += [job.response_id, job.serialized(now)]
            flags = await script(keys=[queue_name, wake_channel(queue_name)], args=args)
            added.update(zip(queued, map(bool, flags), strict=True))
    except (RedisError, OSError) as exc:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from exc
    return added


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

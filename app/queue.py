"""The work queue as the API sees it: enqueue `generate` by name (app never imports workers),
and signal running generations to stop."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from app import arq_seam
from app.redis_keys import GENERATE_JOB, STOP_CHANNEL, TRANSIENT_CLAIM_PREFIX
from app.redis_link import REDIS_DOWN, REDIS_LINK


def queue_pool(redis_url: str, queue_name: str) -> ArqRedis:
    """arq's Redis client (the queue, pub/sub and keys share it), made without connecting: each
    connection opens when first used, so a process starts, and waits, while Redis is away."""
    return ArqRedis(
        ConnectionPool.from_url(redis_url, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS),
        job_serializer=job_serializer,
        job_deserializer=job_deserializer,
        default_queue_name=queue_name,
    )


REDIS_CONNECT_TIMEOUT_SECONDS = 1  # as arq's own pools: an unreachable host fails fast


def job_serializer(job: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a job in Redis must never be able to run code.
    return json.dumps(job).encode()


def job_deserializer(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(data)
    return result


@dataclass(frozen=True, slots=True)
class GenerateJob:
    """A `generate` job for one response on one queue; its job id is the response id."""

    response_id: str
    queue_name: str
    transient: str | None = None  # a store=false response's request, as JSON: the job carries it

    @classmethod
    def of(cls, response_id: str, queue_name: str, transient: dict[str, Any] | None = None) -> GenerateJob:
        return cls(response_id, queue_name, None if transient is None else json.dumps(transient))

    def serialized(self, now: int) -> bytes:
        args = (self.response_id,) if self.transient is None else (self.response_id, json.loads(self.transient))
        return arq_seam.serialized_job(GENERATE_JOB, args, now, job_serializer)


async def enqueue_generate(
    queue: ArqRedis, response_id: str, queue_name: str, transient: dict[str, Any] | None = None
) -> bool:
    """Enqueues with the response id as job id, so enqueueing the same response twice is one job;
    returns whether it was new."""
    job = GenerateJob.of(response_id, queue_name, transient)
    return (await enqueue_many(queue, [job]))[job]


async def enqueue_many(queue: ArqRedis, jobs: Sequence[GenerateJob]) -> dict[GenerateJob, bool]:
    """`enqueue_generate` for many jobs: one script call per queue. Raises what Redis raised,
    once the outage is reported."""
    now = arq_seam.now_ms()
    added: dict[GenerateJob, bool] = {}
    by_queue: dict[str, list[GenerateJob]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue_name, []).append(job)
    try:
        for queue_name, queued in by_queue.items():
            serialized = [(job.response_id, job.serialized(now)) for job in queued]
            flags = await arq_seam.enqueue_serialized(queue, queue_name, serialized, now)
            added.update(zip(queued, flags, strict=True))
    except REDIS_DOWN as error:
        REDIS_LINK.failed("enqueue", error)
        raise
    REDIS_LINK.answered()
    return added


async def signal_stop(queue: ArqRedis, response_id: str, durable: bool) -> None:
    """Tells whichever worker runs the response to stop. A store=false response not yet taken
    is pre-empted by taking its claim first; a stored one is also flagged in Postgres, which
    the worker's lease keeper reads should this message be lost."""
    try:
        if not durable and await queue.set(TRANSIENT_CLAIM_PREFIX + response_id, "stopped", nx=True, ex=3600):
            return
        await queue.publish(STOP_CHANNEL, response_id)
    except REDIS_DOWN as error:  # the lease keeper reads stop requests from Postgres too
        REDIS_LINK.failed("stop signal", error)

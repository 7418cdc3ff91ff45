"""The work queue as the API sees it: enqueue `generate` by name (app never imports workers),
and signal running generations to stop."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias

import orjson
from arq.connections import ArqRedis
from arq.typing import WorkerCoroutine
from arq.worker import func

from app.process.metrics import PLACEMENTS
from app.protocol.response_object import ResponseRecord
from app.queue import arq_seam, transient_runs
from app.queue.arq_seam import QueueWorker
from app.queue.redis_keys import GENERATE_JOB, STEER_CHANNEL, STOP_CHANNEL
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK
from app.queue.redis_servers import connection_pool

# The queue's Redis client (arq's pool): the queue, pub/sub and keys share it.
QueueRedis: TypeAlias = ArqRedis


@dataclass(frozen=True, slots=True)
class JobFunction:
    """A job a worker runs: arq calls `run(ctx, *args)` for each job enqueued under `name`."""

    name: str
    run: WorkerCoroutine
    max_tries: int


def queue_worker(functions: Sequence[JobFunction], queue_name: str, redis_url: str, **options: Any) -> QueueWorker:
    """arq's worker for our jobs on one queue: JSON jobs, no kept results (Postgres holds the
    outcome; a kept result would only block enqueueing the same id again)."""
    defaults: dict[str, Any] = {
        "functions": [func(f.run, name=f.name, max_tries=f.max_tries) for f in functions],
        "queue_name": queue_name,
        "redis_pool": queue_pool(redis_url, queue_name),
        "keep_result": 0,
        "job_serializer": job_serializer,
        "job_deserializer": job_deserializer,
        "log_results": False,
    }
    return QueueWorker(**{**defaults, **options})


def queue_pool(redis_url: str, queue_name: str) -> QueueRedis:
    """arq's Redis client (the queue, pub/sub and keys share it), made without connecting: each
    connection opens when first used, so a process starts, and waits, while Redis is away."""
    return ArqRedis(
        connection_pool(redis_url, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS),
        job_serializer=job_serializer,
        job_deserializer=job_deserializer,
        default_queue_name=queue_name,
    )


REDIS_CONNECT_TIMEOUT_SECONDS = 1  # as arq's own pools: an unreachable host fails fast


def job_serializer(job: dict[str, Any]) -> bytes:
    # JSON, not arq's default pickle: a job in Redis must never be able to run code. orjson: a job
    # that carries its response is encoded on the way to its first token (a tenth of the stdlib's
    # time); the stdlib's for what orjson refuses (an integer past 64 bits in a tool's schema).
    try:
        return orjson.dumps(job)
    except orjson.JSONEncodeError:
        return json.dumps(job).encode()


def job_deserializer(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(data)
    return result


@dataclass(frozen=True, slots=True)
class CarriedResponse:
    """What a job carries of its response, so that its worker need not read Postgres to start it:
    the response as created, and its input. A store=false response's (Postgres has no row of it),
    and a stored one's that starts afresh (its runtime request goes out beside its claim)."""

    record: ResponseRecord
    input: list[dict[str, Any]]
    # The account of a foreground response that its worker stores (app/service/enqueueing.py).
    stored_for: str | None = None

    def encoded(self) -> dict[str, Any]:
        # Its fields as they are (they are encoded at once): `asdict` copied every nested value,
        # most of a job's encoding time.
        record = {f.name: getattr(self.record, f.name) for f in fields(self.record)}
        return {"record": record, "input": self.input, "stored_for": self.stored_for}

    @classmethod
    def decoded(cls, payload: dict[str, Any]) -> CarriedResponse:
        return cls(ResponseRecord(**payload["record"]), payload["input"], payload.get("stored_for"))


@dataclass(frozen=True, slots=True)
class GenerateJob:
    """A `generate` job for one response on one queue; its job id is the response id, and for its
    n-th continuation (its worker stopped or died) `<response id>:<n>`: a new job, since the job
    of a worker that died may still hold the first id."""

    response_id: str
    queue_name: str
    # The response it carries, if any: a store=false one's, or a stored one's that starts afresh.
    # The job's arguments: (id), (id, store=false response), or (id, None, stored response).
    carried: CarriedResponse | None = field(default=None, compare=False)
    continuation: int = 0
    continues: tuple[str, ...] = ()  # the contexts it continues, to be placed by (app/queue/placement.py)

    @property
    def job_id(self) -> str:
        return self.response_id if not self.continuation else f"{self.response_id}:{self.continuation}"

    @property
    def starts_afresh(self) -> bool:
        """Whether it carries a stored response: its worker asks the runtime beside the claim, and,
        hearing the job with its data, beside the take too (workers/jobs/generate.py)."""
        return self.carried is not None and self.carried.record.durable

    def serialized(self, now: int) -> bytes:
        args: tuple[Any, ...] = (self.response_id,)
        if self.carried is not None:
            encoded = self.carried.encoded()
            args = (self.response_id, None, encoded) if self.carried.record.durable else (self.response_id, encoded)
        return arq_seam.serialized_job(GENERATE_JOB, args, now, job_serializer)


async def enqueue_generate(queue: ArqRedis, response_id: str, queue_name: str, continuation: int = 0) -> bool:
    """Enqueues a stored response with its id (and continuation) as job id, so enqueueing the same
    response twice is one job; returns whether it was new."""
    job = GenerateJob(response_id, queue_name, continuation=continuation)
    return (await enqueue_many(queue, [job]))[job]


# What placement did with a job (the enqueue's flag, and whether it continues a context).
_PLACEMENT_OUTCOMES = {
    (arq_seam.ADDED, False): "unplaced",
    (arq_seam.ADDED, True): "unplaced",
    (arq_seam.PLACED_ON_HOLDER, True): "placed",
    (arq_seam.PLACED_ON_LEAST_LOADED, True): "moved",
    (arq_seam.PLACED_ON_LEAST_LOADED, False): "balanced",
}


async def enqueue_many(
    queue: ArqRedis, jobs: Sequence[GenerateJob], placement_wait_ms: int = 0
) -> dict[GenerateJob, bool]:
    """`enqueue_generate` for many jobs: one script call per queue, each job placed on a worker
    (app/queue/placement.py) if `placement_wait_ms`.
    Raises what Redis raised, once the outage is reported."""
    now = arq_seam.now_ms()
    added: dict[GenerateJob, bool] = {}
    by_queue: dict[str, list[GenerateJob]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue_name, []).append(job)
    try:
        for queue_name, queued in by_queue.items():
            serialized = [
                arq_seam.SerializedJob(job.job_id, job.serialized(now), job.continues, job.starts_afresh)
                for job in queued
            ]
            flags = await arq_seam.enqueue_serialized(queue, queue_name, serialized, now, placement_wait_ms)
            for job, flag in zip(queued, flags, strict=True):
                added[job] = flag != arq_seam.NOT_ADDED
                if flag != arq_seam.NOT_ADDED and placement_wait_ms:
                    PLACEMENTS.labels(_PLACEMENT_OUTCOMES[flag, bool(job.continues)]).inc()
    except REDIS_DOWN as error:
        REDIS_LINK.failed("enqueue", error)
        raise
    REDIS_LINK.answered()
    return added


async def signal_steer(queue: ArqRedis, response_id: str) -> None:
    """Tells whichever worker runs the response that it was steered. A lost message costs only the
    early end: the steer is applied when the response ends anyway (and a stored one's continuation
    reads it from Postgres)."""
    try:
        await queue.publish(STEER_CHANNEL, response_id)
    except REDIS_DOWN as error:
        REDIS_LINK.failed("steer signal", error)


async def signal_stop(queue: ArqRedis, response_id: str, durable: bool) -> None:
    """Tells whichever worker runs the response to stop. A store=false response not yet taken
    is pre-empted by taking its claim first; a stored one is also flagged in Postgres, which
    the worker's lease keeper reads should this message be lost."""
    try:
        if not durable and await transient_runs.preempt(queue, response_id):
            return
        await queue.publish(STOP_CHANNEL, response_id)
    except REDIS_DOWN as error:  # the lease keeper reads stop requests from Postgres too
        REDIS_LINK.failed("stop signal", error)

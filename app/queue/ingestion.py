"""Ingestion jobs: one `ingest_file` job per file attached to a vector store, on the queue of the
workers that embed with the store's model: the base queue, which the workers serving external
models (`responses-server worker`) take beside generation, or, for an embedding model a worker
hosts (runtime vllm), that worker's own; a worker hosting a generation model never takes them.
Its id names the store, the file and the attempt, so that enqueueing the same attachment twice
is one job."""

from __future__ import annotations

from collections.abc import Sequence

from arq.connections import ArqRedis

from app.queue import arq_seam
from app.queue.jobs import job_serializer
from app.queue.redis_keys import INGEST_JOB


def ingest_job_id(store_id: str, file_id: str, attempt: int) -> str:
    return f"ingest:{store_id}:{file_id}:{attempt}"


async def enqueue_ingestions(
    queue: ArqRedis, queue_name: str, attachments: Sequence[tuple[str, str, int]]
) -> list[bool]:
    """Enqueues `(store id, file id, attempts so far)` each; whether each was new to arq."""
    if not attachments:
        return []
    now = arq_seam.now_ms()
    serialized = [
        arq_seam.SerializedJob(
            ingest_job_id(store_id, file_id, attempts),
            arq_seam.serialized_job(INGEST_JOB, (store_id, file_id), now, job_serializer),
        )
        for store_id, file_id, attempts in attachments
    ]
    flags = await arq_seam.enqueue_serialized(queue, queue_name, serialized, now)  # (it wakes the workers)
    return [flag != arq_seam.NOT_ADDED for flag in flags]

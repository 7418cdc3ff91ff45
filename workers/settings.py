"""The arq worker: `responses-server worker` runs `arq` with these settings."""

from __future__ import annotations

from typing import Any

from arq.connections import RedisSettings
from arq.worker import func

from app.queue import job_deserializer, job_serializer
from app.redis_keys import GENERATE_JOB
from app.settings import Settings
from workers.deps import WorkerDeps
from workers.generate import generate
from workers.queue_worker import QueueWorker


async def _startup(ctx: dict[str, Any]) -> None:
    deps = WorkerDeps.open(ctx["settings"], ctx["redis"])
    deps.start()
    ctx["deps"] = deps


async def _shutdown(ctx: dict[str, Any]) -> None:
    if "deps" in ctx:
        await ctx["deps"].close()


def build_worker(settings: Settings, **overrides: Any) -> QueueWorker:
    """A worker tuned for token latency (poll every 10 ms) and GPU batching (hundreds of jobs at once)."""
    options: dict[str, Any] = {
        "functions": [func(generate, name=GENERATE_JOB, max_tries=3)],
        "queue_name": settings.queue_name,
        "redis_settings": RedisSettings.from_dsn(settings.redis_url),
        "on_startup": _startup,
        "on_shutdown": _shutdown,
        "ctx": {"settings": settings},
        "max_jobs": settings.worker_max_jobs,
        "poll_delay": settings.worker_poll_delay,
        "job_timeout": settings.job_timeout_seconds,
        "job_completion_wait": settings.shutdown_grace_seconds,
        # Postgres holds the outcome; a kept arq result would only block re-enqueueing the same id.
        "keep_result": 0,
        "job_serializer": job_serializer,
        "job_deserializer": job_deserializer,
        "log_results": False,
    }
    options.update(overrides)
    return QueueWorker(**options)

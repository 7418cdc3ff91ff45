"""The arq worker: `responses-server worker` runs `arq` with these settings."""

from __future__ import annotations

import time
from typing import Any

from arq.connections import RedisSettings
from arq.worker import Worker, func

from app.queue import job_deserializer, job_serializer
from app.redis_keys import GENERATE_JOB
from app.settings import Settings
from workers.deps import WorkerDeps
from workers.generate import generate


class ResponsesWorker(Worker):
    """arq's worker, minus its most expensive habit: a job stays in the queue's sorted set until
    it finishes, and every poll (every 10 ms here) re-checks every listed job with three Redis
    round trips — hundreds of running generations made that most of a worker's CPU. Jobs this
    worker runs are skipped outright; jobs found running elsewhere are skipped for a second."""

    ELSEWHERE_SECONDS = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._elsewhere: dict[bytes, float] = {}

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        now = time.monotonic()
        fresh = [j for j in job_ids if j.decode() not in self.tasks and self._elsewhere.get(j, 0.0) < now]
        await super().start_jobs(fresh)
        if self.job_counter < self.max_jobs:  # every fresh id was examined: the ones not started run elsewhere
            self._elsewhere = {j: t for j, t in self._elsewhere.items() if t >= now}
            self._elsewhere.update({j: now + self.ELSEWHERE_SECONDS for j in fresh if j.decode() not in self.tasks})


async def _startup(ctx: dict[str, Any]) -> None:
    deps = WorkerDeps.open(ctx["settings"], ctx["redis"])
    deps.start()
    ctx["deps"] = deps


async def _shutdown(ctx: dict[str, Any]) -> None:
    if "deps" in ctx:
        await ctx["deps"].close()


def build_worker(settings: Settings, **overrides: Any) -> Worker:
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
    return ResponsesWorker(**options)

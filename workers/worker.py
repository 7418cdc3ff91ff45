"""The worker process (`responses-server worker`): arq's worker with our jobs, its `WorkerState`
opened at startup and closed at shutdown."""

from __future__ import annotations

from functools import partial
from typing import Any

from app.catalog import Catalog
from app.process import gc_tuning
from app.queue.arq_seam import QueueWorker
from app.queue.jobs import JobFunction, queue_worker
from app.queue.redis_keys import COUNT_TOKENS_JOB, EMBED_JOB, GENERATE_JOB, INGEST_JOB
from app.settings import Settings
from workers.health_port import WorkerHealth
from workers.jobs.count_tokens import count_input_tokens
from workers.jobs.embed import embed_texts
from workers.jobs.generate import generate
from workers.jobs.ingest import ingest_file
from workers.runtimes.hosting import hosted_queue, start_model_server
from workers.state import WorkerState, new_worker_id


async def _startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    catalog: Catalog = ctx["catalog"]
    health = None
    if settings.worker_port is not None:  # first: a model server's slow start is "not ready", not "dead"
        health = ctx["health"] = WorkerHealth(settings.worker_port)
        await health.start()
    supervisor = None
    if ctx["hosted_model"] is not None:  # jobs wait in the queue until the model's server answers
        catalog, supervisor = await start_model_server(catalog, ctx["hosted_model"])
    state = WorkerState.open(settings, ctx["redis"], catalog, supervisor, ctx["queue_name"], ctx["worker_id"])
    state.start()
    await state.announce()
    ctx["state"] = state
    if health is not None:
        health.state = state
    gc_tuning.tune_after_startup()


async def _shutdown(ctx: dict[str, Any]) -> None:
    if "state" in ctx:
        ctx["state"].draining = True  # no longer ready: it takes no new job
        await ctx["state"].close()
    if "health" in ctx:
        await ctx["health"].close()


def build_worker(settings: Settings, hosted_model: str | None = None, **overrides: Any) -> QueueWorker:
    """A worker tuned for token latency (poll every 10 ms) and GPU batching (hundreds of jobs at
    once). With `hosted_model` it starts that model's server and serves that model's queue;
    without, it serves every model on an external server."""
    catalog = Catalog.load(settings.models_path)  # read once: a bad catalog stops the worker here
    queue_name = settings.queue_name
    if hosted_model is not None:
        queue_name = hosted_queue(catalog, hosted_model, settings.queue_name)
    jobs = [
        JobFunction(GENERATE_JOB, generate, 3),
        JobFunction(COUNT_TOKENS_JOB, count_input_tokens, 1),
        JobFunction(INGEST_JOB, ingest_file, 1),
        JobFunction(EMBED_JOB, embed_texts, 1),
    ]
    options: dict[str, Any] = {
        "on_startup": _startup,
        "on_shutdown": _shutdown,
        "ctx": {
            "settings": settings,
            "catalog": catalog,
            "hosted_model": hosted_model,
            "queue_name": queue_name,
            "worker_id": new_worker_id(),
        },
        "max_jobs": settings.worker_max_jobs,
        "poll_delay": settings.worker_poll_delay,
        "job_timeout": settings.job_timeout_seconds,
        "job_completion_wait": settings.shutdown_grace_seconds,
    }
    options.update(overrides)
    worker = queue_worker(jobs, options.pop("queue_name", queue_name), settings.redis_url, **options)
    worker.on_drain = partial(_drain, worker.ctx)
    if settings.placement_wait_ms:  # (its WorkerState has the same id)
        worker.placement_id = worker.ctx["worker_id"]
    return worker


async def _drain(ctx: dict[str, Any]) -> bool:
    """On SIGTERM: whether to hand this worker's generations over at once (another worker of its
    queue is alive) rather than let them finish within the grace period."""
    state: WorkerState | None = ctx.get("state")
    return state is not None and await state.begin_draining()

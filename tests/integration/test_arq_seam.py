"""The contract with arq's internals (app/queue/arq_seam.py), against the installed arq and real Redis.
If an arq release changes anything the seam relies on, a test here fails: what our enqueue
stores must be what arq's own `enqueue_job` stores, read by arq's own `Job` and run by arq's own
`Worker`; a job arq enqueued must be run by ours; the Worker internals we extend must still be
there with the meaning we use; a job delivered more often than its `max_tries` is not run."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
from collections.abc import AsyncIterator
from typing import Any

import arq
import pytest
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import Job, JobStatus, deserialize_job_raw
from arq.worker import Worker, func

from app.queue import arq_seam
from app.queue.jobs import GenerateJob, enqueue_many, job_deserializer, job_serializer
from app.queue.redis_keys import GENERATE_JOB
from app.queue.redis_link import REDIS_LINK
from tests.conftest import Environment


@pytest.fixture
async def redis(environment: Environment) -> AsyncIterator[ArqRedis]:
    pool = await create_pool(
        RedisSettings.from_dsn(environment.redis_url), job_serializer=job_serializer, job_deserializer=job_deserializer
    )
    yield pool
    await pool.aclose()


@pytest.fixture
def queue() -> str:
    return f"responses:test:arq-seam:{secrets.token_hex(4)}"


def new_id() -> str:
    return f"resp_seam_{secrets.token_hex(6)}"


def test_the_installed_arq_is_the_minor_version_the_seam_was_written_for() -> None:
    assert arq.VERSION.startswith("0.28."), arq.VERSION


def test_arqs_key_layout_is_what_the_scripts_and_followers_assume() -> None:
    assert (job_key_prefix, in_progress_key_prefix, retry_key_prefix, result_key_prefix) == (
        "arq:job:",
        "arq:in-progress:",
        "arq:retry:",
        "arq:result:",
    )
    assert (arq_seam.JOB_PREFIX, arq_seam.IN_PROGRESS_PREFIX) == (job_key_prefix, in_progress_key_prefix)


def test_the_worker_internals_the_seam_extends_are_there() -> None:
    assert list(inspect.signature(Worker.start_jobs).parameters) == ["self", "job_ids"]
    assert inspect.iscoroutinefunction(Worker.start_jobs)
    assert list(inspect.signature(Worker._release_sem_dec_counter_on_complete).parameters) == ["self"]
    # Overridden or called by the seam to ride out Redis outages and hand generations over.
    assert list(inspect.signature(Worker._poll_iteration).parameters) == ["self"]
    assert list(inspect.signature(Worker.handle_sig_wait_for_completion).parameters) == ["self", "signum"]
    assert list(inspect.signature(Worker._wait_for_tasks_to_complete).parameters) == ["self", "signum"]
    assert list(inspect.signature(Worker.handle_sig).parameters) == ["self", "signum"]

    async def noop(ctx: dict[str, Any]) -> None:
        pass

    worker = Worker(functions=[func(noop, name="noop")], redis_settings=None, handle_signals=False)
    for attribute in (
        "sem",
        "job_counter",
        "tasks",
        "functions",
        "max_jobs",
        "max_tries",
        "job_timeout_s",
        "in_progress_timeout_s",
        "jobs_complete",
        "jobs_failed",
        "jobs_retried",
        "allow_pick_jobs",
        "ctx",
        "job_deserializer",
        "queue_name",
        "queue_read_limit",
        "on_startup",
        "_job_completion_wait",
        "_handle_signals",
        "health_check_key",
    ):
        assert hasattr(worker, attribute), attribute
    assert isinstance(worker.sem, asyncio.Semaphore) and isinstance(worker.tasks, dict)
    free = worker.sem._value
    worker.job_counter = 1
    worker.sem._value -= 1  # as start_jobs leaves them for a job it started
    worker._release_sem_dec_counter_on_complete()
    assert worker.job_counter == 0 and worker.sem._value == free


async def test_our_enqueue_stores_what_arqs_enqueue_job_stores(redis: ArqRedis, queue: str) -> None:
    ours, theirs = new_id(), new_id()
    [added] = (await enqueue_many(redis, [GenerateJob(ours, queue)])).values()
    assert added
    assert await redis.enqueue_job(GENERATE_JOB, theirs, _job_id=theirs, _queue_name=queue) is not None
    decoded: dict[str, list[Any]] = {}
    for job_id in (ours, theirs):
        data = await redis.get(job_key_prefix + job_id)
        function, args, kwargs, job_try, _ = deserialize_job_raw(data, deserializer=job_deserializer)
        decoded[job_id] = [function, list(args), kwargs, job_try]
        assert await redis.zscore(queue, job_id) is not None
        assert 0 < await redis.pttl(job_key_prefix + job_id) <= 86_400_000
        assert (await Job(job_id, redis, _queue_name=queue, _deserializer=job_deserializer).status()) == (
            JobStatus.queued
        )
    assert decoded[ours] == [GENERATE_JOB, [ours], {}, None]
    assert decoded[theirs] == [GENERATE_JOB, [theirs], {}, None]
    # Like enqueue_job, it refuses an id already queued.
    assert list((await enqueue_many(redis, [GenerateJob(ours, queue)])).values()) == [False]
    assert await redis.enqueue_job(GENERATE_JOB, ours, _job_id=ours, _queue_name=queue) is None


async def run_burst(worker: Worker) -> None:
    async with asyncio.timeout(20):
        await worker.main()
    await worker.close()


def worker_options(environment: Environment, queue: str, runs: list[Any], max_tries: int = 3) -> dict[str, Any]:
    async def record(ctx: dict[str, Any], response_id: str) -> None:
        runs.append((response_id, ctx["job_try"]))

    return {
        "functions": [func(record, name=GENERATE_JOB, max_tries=max_tries)],
        "queue_name": queue,
        "redis_settings": RedisSettings.from_dsn(environment.redis_url),
        "job_serializer": job_serializer,
        "job_deserializer": job_deserializer,
        "handle_signals": False,
        "keep_result": 0,
        "burst": True,
        "poll_delay": 0.01,
    }


async def test_arqs_own_worker_runs_a_job_our_enqueue_stored(
    redis: ArqRedis, queue: str, environment: Environment
) -> None:
    job_id = new_id()
    await enqueue_many(redis, [GenerateJob(job_id, queue)])
    runs: list[Any] = []
    await run_burst(Worker(**worker_options(environment, queue, runs)))
    assert runs == [(job_id, 1)]
    assert await redis.zscore(queue, job_id) is None


async def test_our_worker_runs_a_job_arq_enqueued_and_removes_it_as_arq_does(
    redis: ArqRedis, queue: str, environment: Environment
) -> None:
    job_id = new_id()
    await redis.enqueue_job(GENERATE_JOB, job_id, _job_id=job_id, _queue_name=queue)
    runs: list[Any] = []
    worker = arq_seam.QueueWorker(**worker_options(environment, queue, runs))
    await run_burst(worker)
    assert runs == [(job_id, 1)] and worker.jobs_complete == 1
    assert (await Job(job_id, redis, _queue_name=queue).status()) == JobStatus.not_found
    for prefix in (job_key_prefix, in_progress_key_prefix, retry_key_prefix):
        assert not await redis.exists(prefix + job_id)


async def test_a_job_delivered_more_often_than_its_max_tries_is_not_run(
    redis: ArqRedis, queue: str, environment: Environment
) -> None:
    """arq counts deliveries in its retry key (a worker that died mid-job leaves it counted)."""
    job_id = new_id()
    await enqueue_many(redis, [GenerateJob(job_id, queue)])
    await redis.set(retry_key_prefix + job_id, 2)  # two deliveries whose workers vanished
    runs: list[Any] = []
    worker = arq_seam.QueueWorker(**worker_options(environment, queue, runs, max_tries=3))
    await run_burst(worker)
    assert runs == [(job_id, 3)]  # the third and last try runs

    exhausted = new_id()
    await enqueue_many(redis, [GenerateJob(exhausted, queue)])
    await redis.set(retry_key_prefix + exhausted, 3)
    runs.clear()
    worker = arq_seam.QueueWorker(**worker_options(environment, queue, runs, max_tries=3))
    await run_burst(worker)
    assert runs == [] and worker.jobs_failed == 1
    assert await redis.zscore(queue, exhausted) is None


async def test_a_poll_with_every_slot_busy_does_not_take_redis_for_back(
    redis: ArqRedis, queue: str, environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """arq's poll reads the queue only while a slot is free: one that asked Redis nothing must not
    report an outage over (a busy worker said "Redis is back" every second while it was down)."""
    worker = arq_seam.QueueWorker(**{**worker_options(environment, queue, []), "max_jobs": 1})
    worker._pool = redis
    worker.job_counter = worker.max_jobs  # every slot busy
    # Who says Redis is back: tasks an earlier test left on the session's loop may say so too,
    # while this test's poll awaits; what counts is whether the poll itself did.
    reported_by: list[asyncio.Task[Any] | None] = []
    answered = REDIS_LINK.answered

    def noting_who() -> None:
        with contextlib.suppress(RuntimeError):  # (the lease keeper's thread has no loop)
            reported_by.append(asyncio.current_task())
        answered()

    monkeypatch.setattr(REDIS_LINK, "answered", noting_who)
    this_test = asyncio.current_task()
    REDIS_LINK.failed("a test's outage", ConnectionError("refused"))
    try:
        await worker._poll_iteration()
        assert this_test not in reported_by  # still down, as far as anything that asked Redis knows
        worker.job_counter = 0
        await worker._poll_iteration()  # reads the queue: Redis answered
        assert this_test in reported_by
        assert REDIS_LINK.down_for == 0
    finally:
        answered()

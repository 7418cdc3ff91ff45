"""The queue worker's own job handling, against real Redis: how a job is taken, run, removed, or
left for another worker. The job function here only records its calls; what `generate` does
with a delivery is tested in test_invariants.py."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from arq.connections import ArqRedis, RedisSettings
from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from arq.jobs import deserialize_job_raw
from arq.utils import timestamp_ms
from arq.worker import func

from app.process.metrics import REGISTRY
from app.protocol.response_object import ResponseRecord
from app.queue import heartbeats, placement
from app.queue.arq_seam import QueueWorker, TakeOf
from app.queue.jobs import (
    CarriedResponse,
    GenerateJob,
    enqueue_generate,
    enqueue_many,
    job_deserializer,
    job_serializer,
)
from app.queue.redis_keys import GENERATE_JOB, LOAD_PREFIX
from app.service.state import AppState
from tests.conftest import Environment, eventually


class Recorder:
    """A stand-in job function: records each run, and can be held until released."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail = False

    async def run(self, ctx: dict[str, Any], response_id: str, transient: object = None) -> None:
        self.runs.append(response_id)
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the job function failed")


StartWorker = Callable[..., Awaitable[QueueWorker]]
RUN = secrets.token_hex(3)  # job ids of this run: a failed run leaves its jobs in Redis for a day


@pytest.fixture
def queue() -> str:
    return f"responses:test:queue-worker:{secrets.token_hex(4)}"


@pytest.fixture
async def start_worker(environment: Environment, queue: str) -> AsyncIterator[StartWorker]:
    started: list[tuple[QueueWorker, asyncio.Task[None]]] = []

    async def start(
        recorder: Recorder,
        worker_class: type[QueueWorker] = QueueWorker,
        placement_id: str | None = None,
        **options: Any,
    ) -> QueueWorker:
        worker = worker_class(
            functions=[func(recorder.run, name=GENERATE_JOB, max_tries=3)],
            queue_name=queue,
            redis_settings=RedisSettings.from_dsn(environment.redis_url),
            job_serializer=job_serializer,
            job_deserializer=job_deserializer,
            handle_signals=False,
            keep_result=0,
            **{"poll_delay": 0.01, **options},
        )
        worker.placement_id = placement_id
        task = asyncio.create_task(worker.main())
        started.append((worker, task))
        await eventually(lambda: worker._started.is_set())
        return worker

    yield start
    for worker, task in started:
        task.cancel()
        for job in worker.tasks.values():
            job.cancel()
        await asyncio.gather(task, *worker.tasks.values(), return_exceptions=True)
        await worker.pool.aclose()


async def start_listening_only(start_worker: StartWorker, recorder: Recorder) -> QueueWorker:
    """A worker that polls once at start, then only hears wake-ups."""
    worker = await start_worker(recorder, poll_delay=3600)
    await asyncio.sleep(0.1)  # its one poll is done
    return worker


async def job_ended(worker: QueueWorker, job_id: str) -> None:
    """Waits until the task that ran this job (already seen running) has also cleaned up after it."""
    await eventually(lambda: job_id not in worker.tasks or worker.tasks[job_id].done())


async def job_keys(redis: ArqRedis, queue: str, job_id: str) -> dict[str, bool]:
    return {
        "queued": await redis.zscore(queue, job_id) is not None,
        "job": bool(await redis.exists(job_key_prefix + job_id)),
        "in_progress": bool(await redis.exists(in_progress_key_prefix + job_id)),
        "tries": bool(await redis.exists(retry_key_prefix + job_id)),
    }


NOTHING_LEFT = {"queued": False, "job": False, "in_progress": False, "tries": False}


async def test_a_woken_worker_starts_the_job_without_polling(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    worker = await start_listening_only(start_worker, recorder)
    await enqueue_generate(state.redis, f"resp_woken_{RUN}", queue)
    await eventually(lambda: recorder.runs == [f"resp_woken_{RUN}"], timeout=2.0)
    await job_ended(worker, f"resp_woken_{RUN}")
    assert await job_keys(state.redis, queue, f"resp_woken_{RUN}") == NOTHING_LEFT


async def test_a_job_woken_while_every_slot_was_taken_starts_when_one_frees_without_polling(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    worker = await start_worker(recorder, poll_delay=3600, max_jobs=1)
    await asyncio.sleep(0.1)  # its one poll is done
    recorder.release.clear()
    await enqueue_generate(state.redis, f"resp_first_{RUN}", queue)
    await eventually(lambda: recorder.runs == [f"resp_first_{RUN}"])
    await enqueue_generate(state.redis, f"resp_waits_{RUN}", queue)  # heard, but no slot is free
    await asyncio.sleep(0.2)
    assert recorder.runs == [f"resp_first_{RUN}"]
    recorder.release.set()
    await eventually(lambda: recorder.runs == [f"resp_first_{RUN}", f"resp_waits_{RUN}"], timeout=2.0)
    await job_ended(worker, f"resp_waits_{RUN}")
    assert await job_keys(state.redis, queue, f"resp_waits_{RUN}") == NOTHING_LEFT


async def test_a_job_frees_its_slot_when_its_function_returns_before_redis_is_tidied(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    """At as many streams as slots, a new response must not wait for an ended one's clean-up."""
    tidying = asyncio.Event()

    class HeldTidying(QueueWorker):
        async def _remove_many(self, job_ids: list[str]) -> dict[str, None]:
            await tidying.wait()
            return await super()._remove_many(job_ids)

    recorder = Recorder()
    worker = await start_worker(recorder, worker_class=HeldTidying, poll_delay=3600, max_jobs=1)
    await asyncio.sleep(0.1)  # its one poll is done
    ended, waiting = f"resp_ended_{RUN}", f"resp_next_{RUN}"
    await enqueue_generate(state.redis, ended, queue)
    await eventually(lambda: recorder.runs == [ended])
    await enqueue_generate(state.redis, waiting, queue)
    await eventually(lambda: recorder.runs == [ended, waiting], timeout=2.0)
    assert (await job_keys(state.redis, queue, ended))["job"]  # still being tidied
    tidying.set()
    await job_ended(worker, ended)
    await job_ended(worker, waiting)
    assert await job_keys(state.redis, queue, ended) == NOTHING_LEFT
    assert await job_keys(state.redis, queue, waiting) == NOTHING_LEFT
    assert worker.job_counter == 0


async def test_a_finished_job_leaves_nothing_in_redis(state: AppState, queue: str, start_worker: StartWorker) -> None:
    recorder = Recorder()
    worker = await start_worker(recorder)
    await enqueue_generate(state.redis, f"resp_done_{RUN}", queue)
    await eventually(lambda: recorder.runs == [f"resp_done_{RUN}"])
    await job_ended(worker, f"resp_done_{RUN}")
    assert worker.jobs_complete == 1
    assert recorder.runs == [f"resp_done_{RUN}"]
    assert await job_keys(state.redis, queue, f"resp_done_{RUN}") == NOTHING_LEFT


async def test_a_failing_job_is_removed_and_the_worker_goes_on(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    recorder.fail = True
    worker = await start_worker(recorder)
    await enqueue_generate(state.redis, f"resp_fails_{RUN}", queue)
    await eventually(lambda: recorder.runs == [f"resp_fails_{RUN}"])
    await job_ended(worker, f"resp_fails_{RUN}")
    assert worker.jobs_failed == 1
    recorder.fail = False
    await enqueue_generate(state.redis, f"resp_after_{RUN}", queue)
    await eventually(lambda: worker.jobs_complete == 1)
    assert recorder.runs == [f"resp_fails_{RUN}", f"resp_after_{RUN}"]
    assert await job_keys(state.redis, queue, f"resp_fails_{RUN}") == NOTHING_LEFT


async def test_two_workers_woken_for_one_job_run_it_once(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    recorder.release.clear()
    first, second = await start_worker(recorder), await start_worker(recorder)
    await enqueue_generate(state.redis, f"resp_contended_{RUN}", queue)
    await eventually(lambda: recorder.runs == [f"resp_contended_{RUN}"])
    await asyncio.sleep(0.2)  # both have heard the wake-up and polled many times by now
    recorder.release.set()
    await eventually(lambda: first.jobs_complete + second.jobs_complete == 1)
    assert recorder.runs == [f"resp_contended_{RUN}"]


async def test_a_job_cancelled_by_shutdown_stays_queued_for_another_worker(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    held = Recorder()
    held.release.clear()
    first = await start_worker(held)
    await enqueue_generate(state.redis, f"resp_moved_{RUN}", queue)
    await eventually(lambda: held.runs == [f"resp_moved_{RUN}"])
    # A shutdown: the worker takes no new job, then cancels the running ones past its grace. (Set
    # after the cancel, its next poll could take the released job again before the second worker.)
    first.allow_pick_jobs = False
    first.tasks[f"resp_moved_{RUN}"].cancel()
    await job_ended(first, f"resp_moved_{RUN}")
    keys = await job_keys(state.redis, queue, f"resp_moved_{RUN}")
    assert keys == {"queued": True, "job": True, "in_progress": False, "tries": True}
    taker = Recorder()
    second = await start_worker(taker)
    await eventually(lambda: taker.runs == [f"resp_moved_{RUN}"])
    await job_ended(second, f"resp_moved_{RUN}")
    assert second.jobs_complete == 1
    assert await job_keys(state.redis, queue, f"resp_moved_{RUN}") == NOTHING_LEFT


async def test_a_running_job_is_out_of_the_polls_sight_until_its_worker_would_count_as_gone(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    hung = Recorder()
    hung.release.clear()  # its worker never finishes it, and never renews its in-progress mark
    first = await start_worker(hung)
    first.in_progress_timeout_s = 2.0
    job_id = f"resp_vanished_{RUN}"
    await enqueue_generate(state.redis, job_id, queue)
    await eventually(lambda: hung.runs == [job_id])
    assert await state.redis.zrangebyscore(queue, "-inf", timestamp_ms()) == []  # polls list only waiting jobs
    first.allow_pick_jobs = False
    taker = Recorder()
    second = await start_worker(taker)
    await asyncio.sleep(0.1)  # it has polled several times
    assert taker.runs == []  # still counts as running elsewhere
    await eventually(lambda: taker.runs == [job_id], timeout=5.0)  # its mark expired: as arq, run it again
    await job_ended(second, job_id)
    assert second.jobs_complete == 1


@pytest.mark.parametrize(
    ("case", "key_prefix", "value"),
    [
        ("tired", retry_key_prefix, "3"),  # three deliveries already started it
        ("expired", job_key_prefix, None),  # its job data is gone
    ],
)
async def test_a_job_that_cannot_run_is_removed_without_running(
    state: AppState, queue: str, start_worker: StartWorker, case: str, key_prefix: str, value: str | None
) -> None:
    job_id = f"resp_{case}_{RUN}"
    await enqueue_generate(state.redis, job_id, queue)
    if value is None:
        await state.redis.delete(key_prefix + job_id)
    else:
        await state.redis.set(key_prefix + job_id, value)
    recorder = Recorder()
    worker = await start_worker(recorder)
    await eventually(lambda: worker.jobs_failed == 1)
    await job_ended(worker, job_id)
    assert recorder.runs == []
    assert await job_keys(state.redis, queue, job_id) == NOTHING_LEFT


async def test_a_job_running_elsewhere_is_left_alone(state: AppState, queue: str, start_worker: StartWorker) -> None:
    await enqueue_generate(state.redis, f"resp_elsewhere_{RUN}", queue)
    await state.redis.psetex(in_progress_key_prefix + f"resp_elsewhere_{RUN}", 60_000, b"1")  # another worker has it
    recorder = Recorder()
    await start_worker(recorder)
    await asyncio.sleep(0.3)
    assert recorder.runs == []
    assert await job_keys(state.redis, queue, f"resp_elsewhere_{RUN}") == {
        "queued": True,
        "job": True,
        "in_progress": True,
        "tries": False,
    }
    await state.redis.delete(
        queue, job_key_prefix + f"resp_elsewhere_{RUN}", in_progress_key_prefix + f"resp_elsewhere_{RUN}"
    )


async def test_many_jobs_at_once_are_taken_together_each_run_once_and_all_removed(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    recorder.release.clear()
    first, second = await start_worker(recorder, max_jobs=100), await start_worker(recorder, max_jobs=100)
    job_ids = [f"resp_many_{RUN}_{n}" for n in range(40)]
    await asyncio.gather(*(enqueue_generate(state.redis, job_id, queue) for job_id in job_ids))
    await eventually(lambda: len(recorder.runs) == len(job_ids))
    await asyncio.sleep(0.2)  # every wake-up heard and many polls made by both workers
    recorder.release.set()
    await eventually(lambda: first.jobs_complete + second.jobs_complete == len(job_ids))
    assert sorted(recorder.runs) == sorted(job_ids)
    for job_id in job_ids:
        await job_ended(first, job_id)
        await job_ended(second, job_id)
    assert [await job_keys(state.redis, queue, job_id) for job_id in job_ids] == [NOTHING_LEFT] * len(job_ids)


async def test_jobs_enqueued_together_are_stored_as_arq_stores_them_and_started_by_one_wake_up(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    recorder = Recorder()
    worker = await start_listening_only(start_worker, recorder)
    other_queue = f"{queue}:other"
    jobs = [GenerateJob(f"resp_together_{RUN}_{n}", queue) for n in range(3)]
    record = ResponseRecord("x", "m", "queued", 0.0, None, None, {}, {}, store=False, background=False, stream=True)
    transient = GenerateJob(f"resp_together_{RUN}_e", other_queue, CarriedResponse(record, []))
    recorder.release.clear()  # (the jobs stay while the same response is enqueued again)
    added = await enqueue_many(state.redis, [*jobs, transient])
    assert added == dict.fromkeys([*jobs, transient], True)
    again = await enqueue_many(state.redis, [jobs[0], GenerateJob(f"resp_together_{RUN}_new", other_queue)])
    assert list(again.values()) == [False, True]  # the same response twice is one job
    recorder.release.set()

    # Stored exactly as arq stores an enqueued job: arq reads it back as the call it describes.
    stored = await state.redis.get(job_key_prefix + transient.response_id)
    name, args, kwargs, _, _ = deserialize_job_raw(stored, deserializer=job_deserializer)
    assert (name, list(args), kwargs) == (
        GENERATE_JOB,
        [transient.response_id, CarriedResponse(record, []).encoded()],
        {},
    )
    assert CarriedResponse.decoded(args[1]) == CarriedResponse(record, [])
    assert await state.redis.zscore(other_queue, transient.response_id) is not None

    await eventually(lambda: sorted(recorder.runs) == sorted(job.response_id for job in jobs), timeout=2.0)
    for job in jobs:
        await job_ended(worker, job.response_id)
        assert await job_keys(state.redis, queue, job.response_id) == NOTHING_LEFT
    await state.redis.delete(*(job_key_prefix + j for j in (transient.response_id, f"resp_together_{RUN}_new")))
    await state.redis.delete(other_queue)


# Placement (app/queue/placement.py): workers that place (each with its heartbeat, as
# `WorkerState` writes it, and its load kept by the take and removal scripts), one of them holding
# the context `response:<prev>`, and one that does not place, polling every 10 ms.


@dataclass
class Placing:
    anyone: Recorder  # a worker that takes only what is due for every worker
    holder: Recorder  # holds the context
    other: Recorder  # places too, holds nothing
    holder_id: str
    other_id: str

    def ran(self, job_id: str) -> bool:
        return any(job_id in recorder.runs for recorder in (self.anyone, self.holder, self.other))


async def placing(
    state: AppState, queue: str, start_worker: StartWorker, holder_options: dict[str, Any] | None = None
) -> Placing:
    made = Placing(
        Recorder(), Recorder(), Recorder(), f"holder-{secrets.token_hex(3)}", f"other-{secrets.token_hex(3)}"
    )
    await start_worker(made.anyone)
    await start_worker(made.holder, placement_id=made.holder_id, **(holder_options or {}))
    await start_worker(made.other, placement_id=made.other_id)
    for worker_id in (made.holder_id, made.other_id):
        await beat(state, worker_id, queue)
    await placement.remember(state.redis, made.holder_id, [f"response:resp_prev_{RUN}"])
    return made


async def beat(state: AppState, worker_id: str, queue: str, draining: bool = False) -> None:
    # (gone soon after the test: another test's `responses-server status` lists every worker alive)
    await heartbeats.beat(state.redis, worker_id, {"worker_id": worker_id, "queue": queue, "draining": draining}, 5)


async def load_is(state: AppState, worker_id: str, jobs: int) -> None:
    """Until the worker's load (kept by its take and removal scripts) is this many jobs."""
    async with asyncio.timeout(2.0):
        while int(await state.redis.get(LOAD_PREFIX + worker_id) or 0) != jobs:
            await asyncio.sleep(0.01)


def placements(outcome: str) -> float:
    return REGISTRY.get_sample_value("responses_placements_total", {"outcome": outcome}) or 0.0


def continuing(job_id: str, queue: str, *contexts: str) -> GenerateJob:
    return GenerateJob(job_id, queue, continues=contexts or (f"response:resp_prev_{RUN}",))


async def test_each_turn_continuing_a_context_is_taken_by_the_worker_holding_it(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    placed = await placing(state, queue, start_worker)
    before = placements("placed")
    job_ids = [f"resp_placed_{RUN}_{n}" for n in range(5)]
    for job_id in job_ids:  # (turns: each after the one before ended)
        await enqueue_many(state.redis, [continuing(job_id, queue)], placement_wait_ms=5000)
        await eventually(partial(placed.ran, job_id), timeout=2.0)
        await load_is(state, placed.holder_id, 0)
    assert placed.holder.runs == job_ids and placed.other.runs == placed.anyone.runs == []
    assert placements("placed") == before + 5


async def test_a_turn_whose_holder_is_gone_draining_or_too_busy_goes_to_the_least_loaded_worker(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    placed = await placing(state, queue, start_worker)
    await placement.remember(state.redis, "gone-worker", ["conversation:conv_gone"])  # (no heartbeat)
    await beat(state, "draining-worker", queue, draining=True)
    await placement.remember(state.redis, "draining-worker", ["conversation:conv_draining"])

    # The chain's worker is gone: the conversation's holder is tried next.
    job = continuing(f"resp_second_{RUN}", queue, "response:resp_gone", f"response:resp_prev_{RUN}")
    await enqueue_many(state.redis, [job], placement_wait_ms=5000)
    await eventually(lambda: placed.holder.runs == [job.response_id], timeout=2.0)
    await load_is(state, placed.holder_id, 0)

    # The holder busy with 3 turns, the other idle: past the slack (1.25 x 0 + 2), the turn moves.
    placed.holder.release.clear()
    busy = [continuing(f"resp_busy_{RUN}_{n}", queue) for n in range(3)]
    for n, turn in enumerate(busy):
        await enqueue_many(state.redis, [turn], placement_wait_ms=5000)
        await load_is(state, placed.holder_id, n + 1)
    moved_before = placements("moved")
    for name in ("gone", "draining"):  # (only gone or draining holders: the least loaded takes it)
        await enqueue_many(
            state.redis, [continuing(f"resp_{name}_{RUN}", queue, f"conversation:conv_{name}")], placement_wait_ms=5000
        )
    await eventually(lambda: len(placed.other.runs) == 2, timeout=2.0)
    await load_is(state, placed.other_id, 0)
    await enqueue_many(state.redis, [continuing(f"resp_crowded_{RUN}", queue)], placement_wait_ms=5000)
    await eventually(lambda: len(placed.other.runs) == 3, timeout=2.0)
    assert placed.other.runs == [f"resp_gone_{RUN}", f"resp_draining_{RUN}", f"resp_crowded_{RUN}"]
    assert placements("moved") == moved_before + 3 and placed.anyone.runs == []
    placed.holder.release.set()


async def test_new_contexts_are_spread_over_the_workers_by_load(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    placed = await placing(state, queue, start_worker)
    placed.holder.release.clear()
    placed.other.release.clear()
    fresh = [GenerateJob(f"resp_fresh_{RUN}_{n}", queue) for n in range(10)]
    await enqueue_many(state.redis, fresh, placement_wait_ms=5000)  # (together: one batch)
    await eventually(lambda: len(placed.holder.runs) + len(placed.other.runs) == 10, timeout=2.0)
    assert (len(placed.holder.runs), len(placed.other.runs), placed.anyone.runs) == (5, 5, [])
    placed.holder.release.set()
    placed.other.release.set()


async def test_with_no_wait_or_no_worker_placing_a_job_is_due_at_once_for_every_worker(
    state: AppState, queue: str
) -> None:
    """(On a queue no worker takes from, so that the stored job can be read as it was enqueued.)"""
    holder = f"idle-{secrets.token_hex(3)}"
    await placement.remember(state.redis, holder, [f"response:resp_prev_{RUN}"])
    lonely = f"{queue}:lonely"
    await enqueue_many(state.redis, [continuing(f"resp_lonely_{RUN}", lonely)], placement_wait_ms=5000)
    await beat(state, holder, queue)
    await enqueue_many(state.redis, [continuing(f"resp_nowait_{RUN}", queue)], placement_wait_ms=0)
    await enqueue_many(state.redis, [continuing(f"resp_waits_{RUN}", queue)], placement_wait_ms=5000)
    now = timestamp_ms()
    assert (await state.redis.zscore(lonely, f"resp_lonely_{RUN}") or now + 1) <= now  # nobody places there
    assert (await state.redis.zscore(queue, f"resp_nowait_{RUN}") or now + 1) <= now
    assert (await state.redis.zscore(queue, f"resp_waits_{RUN}") or 0) > now + 4000  # placed: due when the wait ends
    for name, job in ((lonely, "lonely"), (queue, "nowait"), (queue, "waits")):
        await state.redis.zrem(name, f"resp_{job}_{RUN}")
        await state.redis.delete(job_key_prefix + f"resp_{job}_{RUN}")


async def test_a_placed_job_its_worker_has_no_slot_for_goes_to_another_at_once(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    placed = await placing(state, queue, start_worker, {"max_jobs": 1})
    placed.holder.release.clear()
    await enqueue_many(state.redis, [continuing(f"resp_full_{RUN}", queue)], placement_wait_ms=5000)
    await eventually(lambda: placed.holder.runs == [f"resp_full_{RUN}"], timeout=2.0)  # its one slot, taken

    handed_on = placements("handed_on")
    job = continuing(f"resp_handed_on_{RUN}", queue)  # (its load, 1, is within the slack: placed there)
    await enqueue_many(state.redis, [job], placement_wait_ms=5000)
    await eventually(lambda: job.response_id in placed.anyone.runs + placed.other.runs, timeout=2.0)
    assert placements("handed_on") == handed_on + 1
    placed.holder.release.set()
    await asyncio.sleep(0.1)
    assert placed.holder.runs == [f"resp_full_{RUN}"]  # taken once


async def test_a_placed_job_whose_worker_never_takes_it_is_due_for_every_worker_when_the_wait_ends(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    """Its worker died with its heartbeat still fresh (or missed the message): the job waits the
    placement wait, no longer, and runs once."""
    anyone = Recorder()
    await start_worker(anyone)
    await beat(state, "dead-worker", queue)
    await placement.remember(state.redis, "dead-worker", [f"response:resp_prev_{RUN}"])
    job = continuing(f"resp_orphan_{RUN}", queue)
    await enqueue_many(state.redis, [job], placement_wait_ms=1000)
    await asyncio.sleep(0.5)
    assert anyone.runs == []
    await eventually(lambda: anyone.runs == [job.response_id], timeout=3.0)
    await asyncio.sleep(0.2)
    assert anyone.runs == [job.response_id]


class HeldTake(QueueWorker):
    """Its takes wait until `let_take` is set; `entered`: each job whose function started, and
    whether its take was still held then."""

    let_take = asyncio.Event()
    entered: list[tuple[str, bool]] = []

    async def _take_many(self, jobs: list[TakeOf]) -> dict[TakeOf, tuple[bytes | None, int]]:
        await self.let_take.wait()
        return await super()._take_many(jobs)


class EnteredRecorder(Recorder):
    async def run(self, ctx: dict[str, Any], response_id: str, *carried: object) -> None:
        HeldTake.entered.append((response_id, not HeldTake.let_take.is_set()))
        await super().run(ctx, response_id)


async def holding_worker(state: AppState, queue: str, start_worker: StartWorker) -> tuple[Recorder, QueueWorker]:
    """A placing worker whose takes are held (HeldTake), holding the context `response:<prev>`."""
    holder, holder_id = EnteredRecorder(), f"holder-{secrets.token_hex(3)}"
    HeldTake.let_take, HeldTake.entered = asyncio.Event(), []
    worker = await start_worker(holder, worker_class=HeldTake, placement_id=holder_id)
    await beat(state, holder_id, queue)
    await placement.remember(state.redis, holder_id, [f"response:resp_prev_{RUN}"])
    return holder, worker


def afresh(job_id: str, queue: str) -> GenerateJob:
    """A job carrying a stored response that starts afresh, continuing the holder's context."""
    record = ResponseRecord(job_id, "m", "queued", 0.0, None, None, {}, {}, store=True, background=False, stream=True)
    return GenerateJob(job_id, queue, CarriedResponse(record, []), continues=(f"response:resp_prev_{RUN}",))


async def test_a_placed_job_carrying_its_response_starts_while_it_is_taken_and_runs_once(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    """Heard with its data, it starts at once (its function's claim in Postgres decides whether it
    runs); a job that does not carry its response starts once taken."""
    holder, worker = await holding_worker(state, queue, start_worker)
    job, plain = afresh(f"resp_afresh_{RUN}", queue), continuing(f"resp_plain_{RUN}", queue)
    await enqueue_many(state.redis, [job, plain], placement_wait_ms=5000)
    await eventually(lambda: HeldTake.entered == [(job.job_id, True)], timeout=2.0)
    assert not (await job_keys(state.redis, queue, job.job_id))["in_progress"]  # its take is held
    await asyncio.sleep(0.1)
    assert HeldTake.entered == [(job.job_id, True)]  # the other waits for its take
    HeldTake.let_take.set()
    await eventually(lambda: HeldTake.entered == [(job.job_id, True), (plain.job_id, False)], timeout=2.0)
    for one in (job, plain):
        await job_ended(worker, one.job_id)
        assert await job_keys(state.redis, queue, one.job_id) == NOTHING_LEFT
    assert sorted(holder.runs) == sorted([job.job_id, plain.job_id])


async def test_a_job_heard_with_its_data_but_taken_elsewhere_is_left_to_its_taker(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    """Another worker took it (its placement wait ended before this worker's take): this worker's
    run of it is one of two deliveries, which the response's claim tells apart, and the job's
    keys stay as its taker holds them."""
    _, worker = await holding_worker(state, queue, start_worker)
    job = afresh(f"resp_elsewhere_{RUN}", queue)
    await state.redis.psetex(in_progress_key_prefix + job.job_id, 60_000, b"1")  # taken by another worker
    await enqueue_many(state.redis, [job], placement_wait_ms=5000)
    await eventually(lambda: HeldTake.entered == [(job.job_id, True)], timeout=2.0)
    HeldTake.let_take.set()
    await job_ended(worker, job.job_id)
    taker_holds = {**NOTHING_LEFT, "queued": True, "job": True, "in_progress": True}
    assert await job_keys(state.redis, queue, job.job_id) == taker_holds
    await state.redis.zrem(queue, job.job_id)
    await state.redis.delete(job_key_prefix + job.job_id, in_progress_key_prefix + job.job_id)


class WatchedTake(QueueWorker):
    """Records each job whose take went out."""

    taken: list[str] = []

    async def _take_many(self, jobs: list[TakeOf]) -> dict[TakeOf, tuple[bytes | None, int]]:
        WatchedTake.taken += [job.job_id for job in jobs]
        return await super()._take_many(jobs)


class UnderWayRecorder(Recorder):
    """Records whether its job's take had gone out at its start and a moment later; then, for a
    job id with `under_way` in it, says that it is under way and waits for its take."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[bool]] = {}

    async def run(self, ctx: dict[str, Any], response_id: str, *carried: object) -> None:
        seen = self.seen.setdefault(response_id, [response_id in WatchedTake.taken])
        await asyncio.sleep(0.1)
        seen.append(response_id in WatchedTake.taken)
        if "under_way" in response_id:
            ctx["under_way"].set()
            await eventually(lambda: response_id in WatchedTake.taken, timeout=2.0)
        await super().run(ctx, response_id)


async def test_a_job_heard_with_its_data_is_taken_once_its_function_is_under_way_or_has_ended(
    state: AppState, queue: str, start_worker: StartWorker
) -> None:
    """The function's first request goes out before the take's round trip (generate: its runtime
    request, app/queue/arq_seam.py `_run_while_taken`); one that never says so is taken once it
    ended. Either way its keys are gone after it."""
    recorder, worker_id = UnderWayRecorder(), f"watched-{secrets.token_hex(3)}"
    WatchedTake.taken = []
    worker = await start_worker(recorder, worker_class=WatchedTake, placement_id=worker_id)
    await beat(state, worker_id, queue)
    await placement.remember(state.redis, worker_id, [f"response:resp_prev_{RUN}"])
    under_way, never = afresh(f"resp_under_way_{RUN}", queue), afresh(f"resp_never_{RUN}", queue)
    await enqueue_many(state.redis, [under_way, never], placement_wait_ms=5000)
    await eventually(lambda: sorted(recorder.runs) == sorted([under_way.job_id, never.job_id]), timeout=2.0)
    for job in (under_way, never):
        await job_ended(worker, job.job_id)
        assert await job_keys(state.redis, queue, job.job_id) == NOTHING_LEFT
    assert recorder.seen == {under_way.job_id: [False, False], never.job_id: [False, False]}
    assert sorted(WatchedTake.taken) == sorted([under_way.job_id, never.job_id])

"""A stored response that starts afresh (app/service/enqueueing.py): its job carries it, it is stored
beside its enqueue, and its worker asks the runtime beside its claim (workers/jobs/generate.py).
Whatever comes first, nothing reaches its log before it is claimed, it is generated once, and a
response that is not stored, or not this worker's, leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from arq.constants import job_key_prefix
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.housekeeping import reaper
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.queue import arq_seam
from app.queue.jobs import CarriedResponse
from app.queue.redis_keys import events_channel
from app.service import creation, stopping
from app.service.enqueueing import Accepted
from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage.driver import autocommit
from app.storage.responses import CarriedClaim
from tests.conftest import FakeRuntime, eventually, within
from tests.integration.conftest import OpenWorker, events_of, job_args, orphaned, status_of
from workers import state as worker_state
from workers.jobs.generate import generate
from workers.state import WorkerState

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(10)), "delay": 0.05})


async def unstored(state: AppState, account_id: str, **body: Any) -> Accepted:
    """A create's response as it is before its hand-over: accepted, not yet stored."""
    accepted = await creation.accept(state, account_id, {"model": "fake", **body}, store_afresh_later=True)
    assert accepted.unstored is not None
    return accepted


async def run_fresh(worker: WorkerState, accepted: Accepted, job_try: int = 1) -> None:
    """The worker's job as a fresh response's job calls it: carrying the response."""
    carried = CarriedResponse(accepted.record, accepted.input_items).encoded()
    await generate({"state": worker, "job_try": job_try}, accepted.record.id, None, carried)


async def test_a_job_that_comes_before_its_row_asks_the_runtime_and_commits_once_claimed(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    accepted = await unstored(state, account_id, input=SLOW, stream=True)
    response_id = accepted.record.id
    job = asyncio.ensure_future(run_fresh(await open_worker(), accepted))
    await eventually(lambda: len(fake.requests()) == 1)  # asked before its row exists
    await asyncio.sleep(0.2)  # (answering meanwhile)
    assert await events_of(state, response_id) == []  # nothing committed before its claim
    assert not job.done()

    await state.store(accepted.unstored)  # type: ignore[arg-type]
    await within(job, 10)
    events = await events_of(state, response_id)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    assert "".join(str(e.get("delta", "")) for e in events) == " ".join(f"w{i}" for i in range(10))
    assert await status_of(state, response_id) == "completed"
    assert len(fake.requests()) == 1


async def test_a_claim_tells_a_row_not_yet_committed_from_one_it_can_never_take(
    state: AppState, account_id: str
) -> None:
    """The job may overtake its response's insert: one claim statement says which responses it
    took (with their continuations), which are stored but not claimable (another worker's, or
    ended: never this worker's), and leaves out those whose rows it does not see yet, an insert
    still uncommitted included, which are claimed again."""
    racing, taken, cancelled = [await unstored(state, account_id, input=name) for name in ("racing", "taken", "gone")]
    for one in (taken, cancelled):
        await state.store(one.unstored)  # type: ignore[arg-type]
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, taken.record.id, "another-worker", 30) is not None
    await stopping.stop(state, cancelled.record.id, durable=True)
    ids = [racing.record.id, taken.record.id, cancelled.record.id, "resp_never_stored"]

    async with state.engine.connect() as inserting:
        insert = await inserting.begin()
        await responses_db.insert_responses(inserting, [racing.unstored])  # type: ignore[list-item]
        async with autocommit(state.engine) as conn:
            claims = await within(responses_db.claim_carried(conn, ids, "w", 30), 5)  # (not waiting for it)
        assert claims == {taken.record.id: CarriedClaim(None), cancelled.record.id: CarriedClaim(None)}
        await insert.commit()
    async with autocommit(state.engine) as conn:
        claims = await responses_db.claim_carried(conn, ids, "w", 30)
    assert claims[racing.record.id] == CarriedClaim(0)
    assert await status_of(state, racing.record.id) == "in_progress"
    assert await status_of(state, taken.record.id) == "in_progress"
    assert await status_of(state, cancelled.record.id) == "cancelled"


async def test_its_claim_and_then_its_take_go_once_its_runtime_request_is_under_way(
    state: AppState, account_id: str, open_worker: OpenWorker
) -> None:
    """On two cores a round trip sent before the runtime request delays it: the claim starts after
    the generation's first step (which sends the request on a kept connection), and the job's take
    is let go then (`under_way`, app/queue/arq_seam.py `_run_while_taken`), after the claim has
    started: the first output's commit waits for the claim, nothing waits for the take."""
    accepted = await unstored(state, account_id, input="hello")
    await state.store(accepted.unstored)  # type: ignore[arg-type]
    worker, under_way, order = await open_worker(), asyncio.Event(), []
    stream, claim = worker.runtime.stream, worker.claim_when_stored

    async def streaming(*args: Any, **kwargs: Any) -> None:
        order.append("runtime request")
        await stream(*args, **kwargs)

    async def claiming(response_id: str) -> int | None:
        order.append("claim")
        return await claim(response_id)

    async def taking_once_under_way() -> None:  # as `_run_while_taken` does
        await under_way.wait()
        order.append("take")

    worker.runtime.stream = streaming  # type: ignore[method-assign]
    worker.claim_when_stored = claiming  # type: ignore[method-assign]
    carried = CarriedResponse(accepted.record, accepted.input_items).encoded()
    ctx = {"state": worker, "job_try": 1, "under_way": under_way}
    taking = asyncio.ensure_future(taking_once_under_way())
    await within(generate(ctx, accepted.record.id, None, carried), 10)
    await within(taking, 1)
    assert order == ["runtime request", "claim", "take"]
    assert await status_of(state, accepted.record.id) == "completed"


async def test_a_job_whose_response_is_never_stored_cancels_its_request_and_leaves_nothing(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_state, "STORED_WAIT_SECONDS", 0.5)
    accepted = await unstored(state, account_id, input="#fake " + json.dumps({"text": "a b c", "delay": 2}))
    await within(run_fresh(await open_worker(), accepted), 10)
    assert len(fake.requests()) == 1
    await eventually(lambda: fake.stats()["streams_aborted"] == 1)  # its request was cancelled
    async with state.engine.connect() as conn:
        assert await responses_db.get_row(conn, accepted.record.id) is None
    assert await events_of(state, accepted.record.id) == []


async def test_a_response_cancelled_before_its_claim_is_not_generated(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    accepted = await unstored(state, account_id, input=SLOW)
    await state.store(accepted.unstored)  # type: ignore[arg-type]
    await stopping.stop(state, accepted.record.id, durable=True)
    await within(run_fresh(await open_worker(), accepted), 10)
    assert [e["type"] for e in await events_of(state, accepted.record.id)] == ["response.cancelled"]
    assert await status_of(state, accepted.record.id) == "cancelled"
    await eventually(lambda: fake.stats()["streams_aborted"] == len(fake.requests()))


async def test_a_fresh_job_delivered_twice_generates_once(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    accepted = await unstored(state, account_id, input=SLOW)
    await state.store(accepted.unstored)  # type: ignore[arg-type]
    first, second = await open_worker(), await open_worker()
    await within(asyncio.gather(run_fresh(first, accepted), run_fresh(second, accepted)), 10)
    events = await events_of(state, accepted.record.id)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.created") == 1
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in events) == 1
    assert await status_of(state, accepted.record.id) == "completed"
    # Both asked the runtime; the one that lost the claim stopped reading it.
    await eventually(lambda: fake.stats()["streams_aborted"] == len(fake.requests()) - 1)


async def released_to_continue(state: AppState, account_id: str) -> Accepted:
    """A fresh response whose worker died mid-answer, released by the reaper to be continued: as
    its first job, which carries it, would find it were that job delivered again. Its answer is
    slow: a request asked beside the claim is still streaming when the claim comes back."""
    response_id = await orphaned(state, account_id, input=SLOW, model="continuing-model")
    channel = events_channel(state.settings.queue_name)
    await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations)
    async with state.engine.connect() as conn:
        record = await responses_db.get_record(conn, response_id)
        carried_input = await items_db.context_items(conn, response_id)  # (its own input: it continues nothing)
    assert record is not None and record.status == "in_progress"
    queue = state.catalog.queue_for("continuing-model", state.settings.queue_name)
    await state.redis.zrem(queue, f"{response_id}:1")  # (its continuation's job: not run here)
    return Accepted(record.evolve(status="queued"), carried_input)


async def assert_continued_once(state: AppState, response_id: str) -> None:
    events = await events_of(state, response_id)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.created") == 1
    assert events[-1]["type"] == "response.completed"


async def test_a_fresh_job_taken_again_claims_before_it_asks_the_runtime(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    """Its first worker stopped (the job is released) or died (arq takes it again): its response
    may be continued, and is not asked for from scratch."""
    carried = await released_to_continue(state, account_id)
    await within(run_fresh(await open_worker(), carried, job_try=2), 10)
    await assert_continued_once(state, carried.record.id)
    [continuation] = fake.requests()
    assert continuation["messages"][-1]["role"] == "user"  # (no output yet: continued from its start)
    assert fake.stats()["streams_aborted"] == 0


async def test_a_first_try_that_finds_its_response_released_continues_it(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    """(Were its try count lost with Redis.) The request asked beside the claim is cancelled."""
    carried = await released_to_continue(state, account_id)
    await within(run_fresh(await open_worker(), carried), 10)
    await assert_continued_once(state, carried.record.id)
    # (The first request, if it reached the runtime before the claim came back, was cancelled.)
    await eventually(lambda: len(fake.requests()) - fake.stats()["streams_aborted"] == 1)


def _caller(account_id: str) -> accounts_db.Caller:
    return accounts_db.Caller(account_id, accounts_db.Limits())


async def test_only_a_response_that_starts_afresh_is_carried_by_its_job(state: AppState, account_id: str) -> None:
    caller = _caller(account_id)
    fresh = await creation.create(state, caller, {"model": "fake", "input": "hi", "background": True}, 100)
    args = await job_args(state, fresh.record.id)
    assert args[:2] == (fresh.record.id, None)
    assert args[2]["record"]["id"] == fresh.record.id
    async with state.engine.connect() as conn:  # stored, with the very input its job carries
        stored = await conn.execute(
            text("SELECT id, payload FROM items WHERE response_id = :id AND side = 'input' ORDER BY position"),
            {"id": fresh.record.id},
        )
        assert args[2]["input"] == [{**payload, "id": item_id} for item_id, payload in stored]
    await stopping.stop(state, fresh.record.id, durable=True)  # (ended: it can be continued)

    # One that continues another reads its chain at its claim; one too large is not copied.
    body = {"model": "fake", "input": "more", "background": True, "previous_response_id": fresh.record.id}
    chained = await creation.create(state, caller, body, 100)
    assert await job_args(state, chained.record.id) == (chained.record.id,)
    body = {"model": "fake", "input": "x" * 70_000, "background": True}
    large = await creation.create(state, caller, body, 70_100)
    assert await job_args(state, large.record.id) == (large.record.id,)
    queue = state.catalog.queue_for("fake", state.settings.queue_name)
    for response_id in (chained.record.id, large.record.id):
        await stopping.stop(state, response_id, durable=True)
    await arq_seam.remove_jobs(state.redis, queue, [fresh.record.id, chained.record.id, large.record.id])


async def test_a_create_whose_insert_is_refused_after_its_enqueue_leaves_no_job(
    state: AppState, account_id: str, refused_inserts: str
) -> None:
    queue = state.catalog.queue_for("fake", state.settings.queue_name)
    queued_before = set(await state.redis.zrange(queue, 0, -1))
    body = {"model": "fake", "input": "hi", "instructions": refused_inserts, "background": True}  # (stored by its API)
    with pytest.raises(DBAPIError, match="refused by the test"):  # (its client gets a 500)
        await creation.create(state, _caller(account_id), body, 100)
    async with state.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT id FROM responses WHERE settings::text LIKE :m"), {"m": f"%{refused_inserts}%"}
        )
        assert found.all() == []
    assert set(await state.redis.zrange(queue, 0, -1)) == queued_before  # its job was enqueued, then removed
    async for key in state.redis.scan_iter(match=job_key_prefix + "*"):
        assert refused_inserts.encode() not in (await state.redis.get(key) or b"")

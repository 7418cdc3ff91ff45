"""One test (at least) per design invariant that would fail if the invariant were broken."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import pytest
from sqlalchemy import select, update

from app.housekeeping import reaper
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES, Status
from app.queue.redis_keys import events_channel
from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage.tables import responses
from tests.conftest import Environment, FakeRuntime, within
from tests.integration.conftest import OpenWorker, accept, events_of, orphaned, run_job, status_of
from workers.translation.translate import StreamTranslator

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(40)), "delay": 0.05})


async def test_same_job_delivered_twice_generates_once(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    response_id = await accept(state, account_id, input="once")
    first, second = await open_worker(), await open_worker()
    await asyncio.gather(run_job(first, response_id), run_job(second, response_id))
    await run_job(first, response_id)  # a late redelivery, after the end
    assert len(fake.requests()) == 1
    events = await events_of(state, response_id)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.created") == 1
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in events) == 1
    assert await status_of(state, response_id) == "completed"


async def test_sequence_numbers_are_contiguous_and_identical_on_reread(
    state: AppState,
    account_id: str,
    open_worker: OpenWorker,
    fake: FakeRuntime,
) -> None:
    worker = await open_worker()
    ids = [await accept(state, account_id, input=f"#fake {json.dumps({'text': 'a b c d e f g h'})}") for _ in range(20)]
    await asyncio.gather(*(run_job(worker, rid) for rid in ids))
    assert worker.writer.batches < worker.writer.events_written  # group commit: many events per commit
    for response_id in ids:
        first_read = await events_of(state, response_id)
        assert [e["sequence_number"] for e in first_read] == list(range(len(first_read)))
        assert first_read[-1]["type"] == "response.completed"
        assert await events_of(state, response_id) == first_read
        async with state.engine.connect() as conn:
            tail = [e.data() for e in await events_db.events_after(conn, response_id, 5, None)]
        assert tail == first_read[6:]


async def test_a_terminal_status_never_changes(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    response_id = await accept(state, account_id, input="final")
    await run_job(await open_worker(), response_id)
    before = await events_of(state, response_id)
    async with state.engine.begin() as conn:
        late = responses_db.Outcome("failed", [], time.time(), error={"code": "x", "message": "late"})
        assert await events_db.end(conn, response_id, [{"type": "response.failed"}], late) == []
        assert await responses_db.claim(conn, response_id, "late-worker", 30) is None
        assert await events_db.append(conn, response_id, [{"type": "response.output_text.delta"}]) == []
    assert await status_of(state, response_id) == "completed"
    assert await events_of(state, response_id) == before


async def _finish_as(state: AppState, response_id: str, status: Status) -> bool:
    async with state.engine.begin() as conn:
        outcome = responses_db.Outcome(status, [], time.time())
        return await events_db.end(conn, response_id, [{"type": f"response.{status}"}], outcome) != []


async def test_cancel_racing_completion_has_one_winner(state: AppState, account_id: str) -> None:
    for _ in range(10):
        response_id = await accept(state, account_id, input="race")
        async with state.engine.begin() as conn:
            assert await responses_db.claim(conn, response_id, "w", 30) is not None

        results = await asyncio.gather(
            _finish_as(state, response_id, "completed"), _finish_as(state, response_id, "cancelled")
        )
        assert sorted(results) == [False, True]
        assert await status_of(state, response_id) == ("completed" if results[0] else "cancelled")


async def test_one_commit_ends_many_responses_and_drops_those_already_ended(state: AppState, account_id: str) -> None:
    """The event writer commits a whole batch as one statement: each response that ends in it
    ends with its events and output, and one that had ended meanwhile gets nothing."""
    ids = [await accept(state, account_id, input=f"batch {i}") for i in range(3)]
    async with state.engine.begin() as conn:
        for response_id in ids:
            assert await responses_db.claim(conn, response_id, "w", 30) is not None
    assert await _finish_as(state, ids[0], "cancelled")  # a cancel wins the race for the first one
    usage = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
    endings = {
        response_id: responses_db.Outcome(
            "completed",
            [{"id": f"msg_{i}_{response_id}", "type": "message", "role": "assistant", "content": []}],
            time.time(),
            usage=usage,
        )
        for i, response_id in enumerate(ids)
    }
    batch = {rid: [{"type": "response.output_text.delta", "delta": "x"}, {"type": "response.completed"}] for rid in ids}
    async with state.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        committed = await events_db.append_many(conn, batch, endings)
    assert set(committed) == set(ids[1:])
    assert [e.sequence_number for e in committed[ids[1]]] == [0, 1]
    async with state.engine.connect() as conn:  # a replay sends the very text followers got live
        assert await events_db.events_after(conn, ids[1], -1, None) == committed[ids[1]]
    for response_id in ids[1:]:
        async with state.engine.connect() as conn:
            record = await responses_db.get_record(conn, response_id)
        assert record is not None and record.status == "completed" and record.usage == usage
        assert [item["id"] for item in record.output] == [endings[response_id].output[0]["id"]]
        assert [e["type"] for e in await events_of(state, response_id)] == [e["type"] for e in batch[response_id]]
    assert await status_of(state, ids[0]) == "cancelled"
    assert [e["type"] for e in await events_of(state, ids[0])] == ["response.cancelled"]


async def test_stopping_a_running_generation_cancels_it_with_its_partial_output(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    response_id = await accept(state, account_id, input=SLOW)
    worker = await open_worker()
    job = asyncio.create_task(run_job(worker, response_id))
    while not any(e["type"] == "response.output_text.delta" for e in await events_of(state, response_id)):
        await asyncio.sleep(0.02)
    from app.service import stopping

    await stopping.stop(state, response_id, durable=True)
    await within(job, 10)
    events = await events_of(state, response_id)
    assert events[-1]["type"] == "response.cancelled"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    async with state.engine.connect() as conn:
        record = await responses_db.get_record(conn, response_id)
    assert record is not None and record.status == "cancelled"
    assert record.output[0]["content"][0]["text"].startswith("w0")


async def test_a_generation_whose_outcome_cannot_be_made_still_ends_failed(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a runtime sent, the response ends with its terminal event, not when the reaper
    finds it."""

    def broken(self: StreamTranslator) -> dict[str, object]:
        raise TypeError("a report nobody foresaw")

    monkeypatch.setattr(StreamTranslator, "usage_object", broken)
    response_id = await accept(state, account_id, input="hello")
    await within(run_job(await open_worker(), response_id), 10)
    assert (await events_of(state, response_id))[-1]["type"] == "response.failed"
    assert await status_of(state, response_id) == "failed"


async def test_a_queued_response_stopped_before_it_runs_never_runs(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    from app.service import stopping

    response_id = await accept(state, account_id, input="never")
    await stopping.stop(state, response_id, durable=True)
    await run_job(await open_worker(), response_id)
    assert fake.requests() == []
    events = await events_of(state, response_id)
    assert [e["type"] for e in events] == ["response.cancelled"]
    assert await status_of(state, response_id) == "cancelled"


async def test_a_dead_workers_response_is_failed_by_the_reaper_where_its_model_cannot_continue_it(
    state: AppState, account_id: str
) -> None:
    response_id = await orphaned(state, account_id)
    channel = events_channel(state.settings.queue_name)
    assert response_id in await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations)
    assert response_id not in await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations)
    events = await events_of(state, response_id)
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert events[-1]["type"] == "response.failed"
    assert "stopped responding" in events[-1]["response"]["error"]["message"]
    assert await status_of(state, response_id) == "failed"


async def test_a_dead_workers_response_is_left_to_another_worker_to_continue_and_its_late_events_dropped(
    state: AppState, account_id: str
) -> None:
    response_id = await orphaned(state, account_id, model="continuing-model")
    channel = events_channel(state.settings.queue_name)
    assert await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations) == []
    [row] = await rows_of(state, response_id, responses.c.status, responses.c.worker_id, responses.c.continuations)
    assert tuple(row) == ("in_progress", None, 1)  # running, waiting for a worker to continue it
    queue = state.catalog.queue_for("continuing-model", state.settings.queue_name)
    assert await state.redis.zscore(queue, f"{response_id}:1") is not None  # its continuation's job
    # The dead worker, had it only stalled, can write nothing more: the response is not its own.
    async with state.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        late = {response_id: [{"type": "response.output_text.delta", "delta": "late"}]}
        assert await events_db.append_many(conn, late, worker_id="dead-worker") == {}
    assert [e["type"] for e in await events_of(state, response_id)] == ["response.created", "response.in_progress"]
    # A second reaper finds nothing to do; a worker's claim takes it up, once.
    assert await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations) == []
    async with state.engine.begin() as conn:
        claims = await responses_db.claim_many(conn, [response_id, response_id], "next-worker", 30)
        assert claims[response_id].continuations == 1
        assert await responses_db.claim_many(conn, [response_id], "third-worker", 30) == {}
    await state.redis.zrem(queue, f"{response_id}:1")


async def rows_of(state: AppState, response_id: str, *columns: Any) -> list[Any]:
    async with state.engine.connect() as conn:
        return list(await conn.execute(select(*columns).where(responses.c.id == response_id)))


async def test_queued_responses_redis_lost_are_requeued_from_postgres(
    state: AppState, account_id: str, environment: Environment, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    response_id = await accept(state, account_id, input="lost job")  # durable, never enqueued
    async with state.engine.begin() as conn:
        await conn.execute(
            update(responses).where(responses.c.id == response_id).values(created_at=responses_db.db_now(-60))
        )
    queue = environment.queue_name + ":requeue-test"  # a queue no other worker of the session reads
    requeued = await reaper.requeue_lost_jobs(state.engine, state.redis, state.catalog, queue, 10)
    assert response_id in requeued
    from workers.worker import build_worker

    worker = build_worker(environment.settings(), queue_name=queue, burst=True, poll_delay=0, handle_signals=False)
    await worker.main()
    await worker.close()
    for _ in range(100):  # another worker's housekeeping may have taken it first; either way it completes
        if await status_of(state, response_id) == "completed":
            break
        await asyncio.sleep(0.1)
    assert await status_of(state, response_id) == "completed"
    async with state.engine.connect() as conn:
        rows = (await conn.execute(select(responses.c.id).where(responses.c.status == "queued"))).all()
    assert response_id not in {r.id for r in rows}


@pytest.mark.parametrize("bad", [{"input": []}, {"input": "x", "temperature": 9}, {"input": "x", "tools": [{}]}])
async def test_bad_input_persists_nothing(state: AppState, account_id: str, bad: dict[str, object]) -> None:
    from app import errors
    from app.service import creation

    async with state.engine.connect() as conn:
        before = (await conn.execute(select(responses.c.id))).all()
    with pytest.raises(errors.InvalidRequest):
        await creation.accept(state, account_id, {"model": "fake", **bad})
    async with state.engine.connect() as conn:
        assert (await conn.execute(select(responses.c.id))).all() == before


async def test_enqueueing_a_response_twice_queues_one_job(
    state: AppState, account_id: str, environment: Environment
) -> None:
    from app.queue.jobs import enqueue_generate

    response_id = await accept(state, account_id, input="once in the queue")
    queue = environment.queue_name + ":enqueue-test"
    assert await enqueue_generate(state.redis, response_id, queue) is True
    assert await enqueue_generate(state.redis, response_id, queue) is False
    assert await state.redis.zcard(queue) == 1
    await state.redis.delete(queue, f"arq:job:{response_id}")


async def test_one_statement_claims_many_each_with_its_own_context(state: AppState, account_id: str) -> None:
    """Jobs starting together are claimed together: each response claimed once, with the context
    of its own chain; one claimed already (or ended) is not claimed again."""
    first = await accept(state, account_id, input="first turn")
    answer = [
        {
            "id": f"msg_{first}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "answer", "annotations": []}],
        }
    ]
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, first, "w", 30) is not None
        outcome = responses_db.Outcome("completed", answer, time.time())
        assert await events_db.end(conn, first, [{"type": "response.completed"}], outcome)
    chained = await accept(state, account_id, input="second turn", previous_response_id=first)
    several = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "alone"}]
    alone = await accept(state, account_id, input=several)
    taken = await accept(state, account_id, input="taken")
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, taken, "another-worker", 30) is not None
        claims = await responses_db.claim_many(conn, [chained, alone, taken, first, "resp_unknown"], "w", 30)
    assert set(claims) == {chained, alone}

    def text_of(item: dict[str, Any]) -> str:
        content = item["content"]
        return str(content if isinstance(content, str) else content[0]["text"])

    assert [(item["role"], text_of(item)) for item in claims[chained].context] == [
        ("user", "first turn"),
        ("assistant", "answer"),
        ("user", "second turn"),
    ]
    assert claims[chained].context[1]["id"] == f"msg_{first}"
    assert [text_of(item) for item in claims[alone].context] == ["be brief", "alone"]
    assert claims[alone].record.status == claims[chained].record.status == "in_progress"
    # A response that continues nothing has its input brought back by the claim itself: the very
    # items (ids, keys in their order) that reading its context gives.
    async with state.engine.connect() as conn:
        read = await items_db.context_items(conn, alone)
    assert claims[alone].context == read and [list(item) for item in claims[alone].context] == [list(i) for i in read]


async def test_requests_authenticated_together_each_get_their_own_account(state: AppState) -> None:
    """Keys checked by one statement (app/process/batching.py) answer as if checked alone: each its own
    account, nothing for a revoked or unknown key."""
    names = [f"together-{secrets.token_hex(3)}" for _ in range(2)]
    async with state.engine.begin() as conn:
        (_, first_key), (second, second_key) = [await accounts_db.create_key(conn, name) for name in names]
        assert await accounts_db.revoke_key(conn, second.id) == 1
        _, third_key = await accounts_db.create_key(conn, names[1])
    keys = [first_key, second_key, "sk-rs-unknown", third_key, first_key]
    callers = await asyncio.gather(*(state.authenticate(accounts_db.hash_key(key)) for key in keys))
    accounts = [None if caller is None else caller.account_id for caller in callers]
    async with state.engine.connect() as conn:
        own = {name: await accounts_db.ensure_account(conn, name) for name in names}
    assert accounts == [own[names[0]], None, None, own[names[1]], own[names[0]]]

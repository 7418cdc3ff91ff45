"""A foreground response that starts afresh is stored by its worker (app/service/enqueueing.py): its
API only enqueues it, and its worker's insert is its claim. If no worker stores it in time, its API
does, queued, so that it outlives Redis; whichever stores it second leaves it as it is, and it is
generated once."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.housekeeping import reaper
from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.queue import arq_seam
from app.service import creation, enqueueing
from app.service.admission import RateLimited
from app.service.creation import Created
from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage import responses as responses_db
from tests.conftest import FakeRuntime, eventually, within
from tests.integration.conftest import OpenWorker, events_of, job_args, status_of
from workers.jobs.generate import generate
from workers.state import WorkerState

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(10)), "delay": 0.05})
ANSWER = " ".join(f"w{i}" for i in range(10))


def queue_of(state: AppState) -> str:
    return state.catalog.queue_for("fake", state.settings.queue_name)


async def creating(state: AppState, account_id: str, **body: Any) -> tuple[Created, str]:
    """A foreground create, answered (its events not yet read), and its response's id."""
    caller = accounts_db.Caller(account_id, accounts_db.Limits())
    created = await within(creation.create(state, caller, {"model": "fake", **body}, 100), 5)
    return created, created.record.id


async def run_job(worker: WorkerState, state: AppState, response_id: str, job_try: int = 1) -> None:
    """The worker's job as arq would call it, with the arguments the API enqueued."""
    await generate({"state": worker, "job_try": job_try}, *await job_args(state, response_id))


async def stored_row(state: AppState, response_id: str) -> Any:
    async with state.engine.connect() as conn:
        return await responses_db.get_row(conn, response_id)


async def answer_of(created: Created) -> tuple[list[str], str]:
    """The event types and the text a client of the create reads, to its end."""
    assert created.events is not None
    types, text_parts = [], []
    async for batch in created.events:
        for event in batch or []:
            types.append(event.type)
            text_parts.append(str(event.data().get("delta", "")))
    return types, "".join(text_parts)


async def eventually_stored(state: AppState, response_id: str, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while await stored_row(state, response_id) is None:
            await asyncio.sleep(0.01)


async def assert_generated_once(state: AppState, response_id: str) -> None:
    events = await events_of(state, response_id)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.created") == 1
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in events) == 1
    assert "".join(str(e.get("delta", "")) for e in events) == ANSWER
    assert await status_of(state, response_id) == "completed"


async def test_its_api_only_enqueues_it_and_its_worker_stores_it_claimed(
    state: AppState, account_id: str, open_worker: OpenWorker
) -> None:
    created, response_id = await creating(state, account_id, input=SLOW, stream=True)
    args = await job_args(state, response_id)
    assert args[:2] == (response_id, None) and args[2]["stored_for"] == account_id
    reading = asyncio.ensure_future(answer_of(created))
    await asyncio.sleep(0.3)
    assert await stored_row(state, response_id) is None  # its API stored nothing
    assert not reading.done()

    worker = await open_worker()
    job = asyncio.ensure_future(run_job(worker, state, response_id))
    await eventually_stored(state, response_id)
    row = await stored_row(state, response_id)
    assert row.status in ("in_progress", "completed")
    assert row.worker_id == worker.worker_id and row.started_at is not None
    types, text_read = await within(reading, 10)
    await within(job, 10)
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert text_read == ANSWER
    await assert_generated_once(state, response_id)
    async with state.engine.connect() as conn:  # its input, stored by its worker
        stored = await conn.execute(
            text("SELECT payload FROM items WHERE response_id = :id AND side = 'input'"), {"id": response_id}
        )
        assert [payload["content"] for (payload,) in stored] == [[{"type": "input_text", "text": SLOW}]]


async def test_a_response_whose_job_waits_is_stored_by_its_api_and_claimed_as_it_is(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    created, response_id = await creating(state, account_id, input=SLOW)  # (a JSON answer: the same)
    reading = asyncio.ensure_future(answer_of(created))
    await eventually_stored(state, response_id, enqueueing.STORED_BY_WORKER_WAIT_SECONDS + 5)
    row = await stored_row(state, response_id)
    assert row.status == "queued" and row.worker_id is None

    await within(run_job(await open_worker(), state, response_id), 10)  # its insert finds it: claimed
    types, _ = await within(reading, 10)
    assert types[-1] == "response.completed"
    await assert_generated_once(state, response_id)
    assert len(fake.requests()) == 1


async def test_two_deliveries_of_its_job_generate_it_once(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    created, response_id = await creating(state, account_id, input=SLOW, stream=True)
    first, second = await open_worker(), await open_worker()
    await within(asyncio.gather(run_job(first, state, response_id), run_job(second, state, response_id)), 10)
    await within(answer_of(created), 5)
    await assert_generated_once(state, response_id)
    await eventually(lambda: fake.stats()["streams_aborted"] == len(fake.requests()) - 1)


async def test_a_job_taken_again_after_its_worker_died_before_storing_it_stores_it_and_runs_it(
    state: AppState, account_id: str, open_worker: OpenWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its API's wait is longer than the worker's life here: no one else stored it."""
    monkeypatch.setattr(enqueueing, "STORED_BY_WORKER_WAIT_SECONDS", 60.0)
    monkeypatch.setattr(state.settings, "follow_idle_seconds", 120.0)
    created, response_id = await creating(state, account_id, input=SLOW, stream=True)
    await within(run_job(await open_worker(), state, response_id, job_try=2), 10)
    await within(answer_of(created), 5)
    await assert_generated_once(state, response_id)


async def test_a_response_whose_job_is_lost_before_it_is_stored_is_stored_by_its_api_and_enqueued_again(
    state: AppState, account_id: str, open_worker: OpenWorker
) -> None:
    """Invariant 1: Redis flushed while the job waits for a worker. Its API stored it, queued; the
    reaper enqueues it again from Postgres."""
    created, response_id = await creating(state, account_id, input=SLOW, stream=True)
    await arq_seam.remove_jobs(state.redis, queue_of(state), [response_id])
    await state.redis.delete(arq_seam.JOB_PREFIX + response_id)
    reading = asyncio.ensure_future(answer_of(created))
    await eventually_stored(state, response_id, enqueueing.STORED_BY_WORKER_WAIT_SECONDS + 5)
    assert (await stored_row(state, response_id)).status == "queued"

    requeued = await reaper.requeue_lost_jobs(
        state.engine, state.redis, state.catalog, state.settings.queue_name, older_than_seconds=0
    )
    assert response_id in requeued
    assert await job_args(state, response_id) == (response_id,)  # from its row: nothing carried
    await within(run_job(await open_worker(), state, response_id), 10)
    types, text_read = await within(reading, 10)
    assert types[-1] == "response.completed" and text_read == ANSWER
    await assert_generated_once(state, response_id)


async def test_a_response_postgres_refuses_to_its_worker_is_refused_to_its_client_and_left_nowhere(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime, refused_inserts: str
) -> None:
    queued_before = set(await state.redis.zrange(queue_of(state), 0, -1))
    created, response_id = await creating(state, account_id, input=SLOW, instructions=refused_inserts, stream=True)
    reading = asyncio.ensure_future(answer_of(created))
    await within(run_job(await open_worker(), state, response_id), 10)  # refused: it gives up
    await eventually(lambda: fake.stats()["streams_aborted"] == len(fake.requests()))
    with pytest.raises(DBAPIError, match="refused by the test"):  # its API's own insert is refused too
        await within(reading, enqueueing.STORED_BY_WORKER_WAIT_SECONDS + 5)
    assert await stored_row(state, response_id) is None
    assert await events_of(state, response_id) == []
    assert set(await state.redis.zrange(queue_of(state), 0, -1)) == queued_before


async def test_a_create_admitted_by_counting_stored_responses_is_stored_by_its_api_and_counted_at_once(
    state: AppState,
) -> None:
    """A concurrency limit counts the account's stored responses: its API stores it before its
    client is answered (no worker runs here), so that the next create counts it."""
    async with state.engine.begin() as conn:  # (an account of its own: nothing else of it runs)
        account_id = await accounts_db.ensure_account(conn, f"limited-{secrets.token_hex(3)}")
    caller = accounts_db.Caller(account_id, accounts_db.Limits(max_concurrent=1))
    body = {"model": "fake", "input": SLOW, "stream": True}
    first = await within(creation.create(state, caller, body, 100), 5)
    row = await stored_row(state, first.record.id)
    assert row is not None and row.status == "queued"
    with pytest.raises(RateLimited, match="Concurrency limit reached"):
        await creation.create(state, caller, body, 100)
    assert first.events is not None
    await first.events.aclose()  # type: ignore[attr-defined]
    await arq_seam.remove_jobs(state.redis, queue_of(state), [first.record.id])


async def test_a_client_that_leaves_before_its_worker_stored_it_leaves_it_cancelled_and_not_generated(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    created, response_id = await creating(state, account_id, input=SLOW, stream=True)
    assert created.on_disconnect is not None
    await created.on_disconnect()  # (no worker has taken its job yet)
    assert (await stored_row(state, response_id)).status == "cancelled"
    await within(run_job(await open_worker(), state, response_id), 10)  # finds it cancelled: gives up
    assert [e["type"] for e in await events_of(state, response_id)] == ["response.cancelled"]
    assert await status_of(state, response_id) == "cancelled"
    await eventually(lambda: fake.stats()["streams_aborted"] == len(fake.requests()))

"""Work that must go on while other work stalls or fails: leases renewed while the worker's loop
is busy (and not once it hung), side tasks restarted when they die, an event writer whose
flusher dies leaving no generation waiting, and a generation stopped once its response is no
longer its to run."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import pytest
from sqlalchemy import select, update

from app.events.writer import EventWriter
from app.housekeeping import reaper
from app.process.side_tasks import SideTasks
from app.queue.redis_keys import events_channel
from app.service.state import AppState
from app.storage import responses as responses_db
from app.storage.tables import responses
from tests.conftest import Environment, wait_until
from tests.integration.conftest import accept
from workers import leases
from workers.leases import LeaseKeeper

LEASE = 1.5


async def running_response(state: AppState, account_id: str, worker_id: str) -> str:
    response_id = await accept(state, account_id, input="running")
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, response_id, worker_id, LEASE) is not None
    return response_id


async def lease_left(state: AppState, response_id: str) -> float:
    """Seconds left on the response's lease; -inf once a reaper ended it (any process of the test
    session may run one, and it ends only responses whose lease ran out)."""
    async with state.engine.connect() as conn:
        row = (
            await conn.execute(
                select(responses.c.status, responses.c.lease_expires_at - responses_db.db_now()).where(
                    responses.c.id == response_id
                )
            )
        ).one()
    status, left = row
    if status == "failed" and left is None:
        return float("-inf")
    return float(left.total_seconds())


def keeper_for(environment: Environment, worker_id: str, running: set[str], stopped: list[str]) -> LeaseKeeper:
    settings = environment.settings().model_copy(update={"lease_seconds": LEASE})
    return LeaseKeeper(settings, worker_id, lambda: (frozenset(running), frozenset()), stopped.append)


async def test_leases_are_renewed_while_the_workers_loop_is_busy(
    state: AppState, account_id: str, environment: Environment
) -> None:
    worker_id = f"busy-{secrets.token_hex(3)}"
    response_id = await running_response(state, account_id, worker_id)
    stopped: list[str] = []
    keeper = keeper_for(environment, worker_id, {response_id}, stopped)
    keeper.start()
    try:
        time.sleep(2 * LEASE)  # the loop does CPU work for longer than a lease: nothing else runs on it
        assert await lease_left(state, response_id) > 0
        channel = events_channel(state.settings.queue_name)
        assert response_id not in await reaper.reap_expired_leases(
            state.engine, state.redis, channel, state.continuations
        )
        assert stopped == []
    finally:
        await keeper.close()


async def test_a_loop_that_never_answers_gets_no_more_renewals(
    state: AppState, account_id: str, environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "HUNG_LOOP_SECONDS", LEASE)
    worker_id = f"hung-{secrets.token_hex(3)}"
    response_id = await running_response(state, account_id, worker_id)
    keeper = keeper_for(environment, worker_id, {response_id}, [])
    keeper.start()
    try:
        # The loop hangs (blocks) until the keeper gives up on it, then for one lease more: no
        # renewal can be in flight after the first round that gave up.
        wait_until(lambda: keeper.lapsed > 0)  # the keeper gave up on the hung loop
        time.sleep(LEASE + 0.1)
        assert await lease_left(state, response_id) < 0
    finally:
        await keeper.close()


async def test_a_generation_no_longer_its_workers_is_stopped_by_the_next_round(
    state: AppState, account_id: str, environment: Environment
) -> None:
    worker_id = f"stalled-{secrets.token_hex(3)}"
    reaped, cancelled, kept = [await running_response(state, account_id, worker_id) for _ in range(3)]
    async with state.engine.begin() as conn:
        await conn.execute(update(responses).where(responses.c.id == reaped).values(status="failed"))
        await responses_db.request_stop(conn, cancelled)
    stopped: list[str] = []
    keeper = keeper_for(environment, worker_id, {reaped, cancelled, kept}, stopped)
    keeper.start()
    try:
        async with asyncio.timeout(5):
            while len(stopped) < 2:
                await asyncio.sleep(0.05)
        assert sorted(stopped) == sorted([reaped, cancelled])
    finally:
        await keeper.close()


async def test_a_worker_spares_the_responses_it_runs_when_it_reaps(state: AppState, account_id: str) -> None:
    mine, lost = [await running_response(state, account_id, "slow-worker") for _ in range(2)]
    async with state.engine.begin() as conn:
        expired = responses_db.db_now(-1)
        await conn.execute(update(responses).where(responses.c.id.in_([mine, lost])).values(lease_expires_at=expired))
    channel = events_channel(state.settings.queue_name)
    reaped = await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations, spare={mine})
    assert lost in reaped and mine not in reaped


async def test_a_side_task_that_dies_is_logged_and_started_again(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError(f"failure {len(runs)}")
        await asyncio.Event().wait()

    tasks = SideTasks(restart_delay=0.01)
    tasks.start("flaky", flaky)
    async with asyncio.timeout(5):
        while len(runs) < 3:
            await asyncio.sleep(0.01)
    await tasks.close()
    assert tasks.restarts == 2
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "side task flaky died; it is started again in 0.0s"
    ] * 2


async def test_when_the_flusher_dies_no_generation_waits_for_ever(state: AppState, account_id: str) -> None:
    """A bug in one batch (an event that cannot be encoded) kills the flusher: the batch's
    waiters get the error, the flusher is started again, and later events are written."""
    stored = await running_response(state, account_id, "writer-test")
    writer = EventWriter(state.engine, state.redis, f"responses:events:test-{secrets.token_hex(3)}")
    writer.start()
    try:
        writer.open_transient("resp_broken")
        writer.append("resp_broken", [{"type": "response.in_progress", "unencodable": {1, 2}}])
        outcome = responses_db.Outcome("completed", [], time.time())
        async with asyncio.timeout(10):
            ended = await writer.finish(stored, [{"type": "response.completed"}], outcome)
        assert ended
        async with state.engine.connect() as conn:
            row = await responses_db.get_row(conn, stored)
            assert row is not None and row.status == "completed"
    finally:
        await writer.close()


async def test_a_generation_whose_response_ended_elsewhere_is_stopped_at_its_next_commit(
    state: AppState, account_id: str
) -> None:
    response_id = await running_response(state, account_id, "writer-test")
    async with state.engine.begin() as conn:
        await conn.execute(update(responses).where(responses.c.id == response_id).values(status="failed"))
    writer = EventWriter(state.engine, state.redis, f"responses:events:test-{secrets.token_hex(3)}")
    stopped: list[str] = []
    writer.on_dropped = stopped.append
    writer.start()
    try:
        delta = {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "content_index": 0}
        writer.append(response_id, [{**delta, "delta": "late"}])
        async with asyncio.timeout(5):
            while not stopped:
                await asyncio.sleep(0.01)
        assert stopped == [response_id]
    finally:
        await writer.close()

"""The statements on the way to a first token that no client sees before a later commit do not
wait for the WAL's flush: a foreground response's insert (its API's, or its worker's as it claims
it) and a claim. A background response's insert, answered at once, does; and none of them leaves
its connection committing unflushed (the event writer's commits, on connections from the same
pool, must flush). Their held connections plan the token path's statements once (GENERIC_PLANS
in app/storage/engine.py).

The flushes are counted by Postgres itself (pg_stat_wal.wal_sync, this backend's share made
visible by pg_stat_force_next_flush): a commit that waits for its flush syncs the WAL once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.service import creation
from app.service.state import AppState
from app.storage import responses as responses_db
from app.storage.held import HeldConnection
from tests.integration.conftest import built

STATEMENTS = 10


async def wal_syncs(conn: AsyncConnection) -> int:
    """The WAL syncs so far, this backend's own up to its last statement included."""
    await conn.execute(text("SELECT pg_stat_force_next_flush()"))
    await conn.execute(text("SELECT 1"))  # (its end reports this backend's counts)
    return int(await conn.scalar(text("SELECT wal_sync FROM pg_stat_wal")) or 0)


async def syncs_of(state: AppState, statement: Callable[[AsyncConnection], Awaitable[object]]) -> int:
    """The WAL syncs that STATEMENTS runs of `statement` made, each in its own transaction, on
    a held connection; and that connection still flushes its commits after them."""
    held = HeldConnection(state.held_engine)
    try:
        async with held.use() as conn:
            before = await wal_syncs(conn)
            for _ in range(STATEMENTS):
                await statement(conn)
            syncs = await wal_syncs(conn) - before
            assert await conn.scalar(text("SHOW synchronous_commit")) == "on"
    finally:
        await held.close()
    return syncs


async def new_response(state: AppState, account_id: str, background: bool) -> responses_db.NewResponse:
    return await built(state, account_id, {"model": "fake", "input": "hi", "background": background})


async def test_a_foreground_responses_insert_does_not_wait_for_the_flush(state: AppState, account_id: str) -> None:
    async def insert(conn: AsyncConnection) -> None:
        await responses_db.insert_responses(conn, [await new_response(state, account_id, background=False)])

    # Other processes may flush meanwhile (the WAL writer): far fewer than one a statement.
    assert await syncs_of(state, insert) < STATEMENTS // 2


async def test_a_worker_storing_a_foreground_response_as_it_claims_it_does_not_wait_for_the_flush(
    state: AppState, account_id: str
) -> None:
    async def insert(conn: AsyncConnection) -> None:
        new = await new_response(state, account_id, background=False)
        await responses_db.insert_claimed(conn, [new], responses_db.Claimant("worker-1", 30.0))

    assert await syncs_of(state, insert) < STATEMENTS // 2


async def test_a_background_responses_insert_is_on_disk_before_it_is_answered(state: AppState, account_id: str) -> None:
    async def insert(conn: AsyncConnection) -> None:
        await responses_db.insert_responses(conn, [await new_response(state, account_id, background=True)])

    assert await syncs_of(state, insert) >= STATEMENTS


async def test_a_claim_does_not_wait_for_the_flush(state: AppState, account_id: str) -> None:
    ids = [(await creation.accept(state, account_id, {"model": "fake", "input": "hi"})).record.id for _ in range(10)]
    claimed: list[responses_db.Claim | None] = []

    async def claim(conn: AsyncConnection) -> None:
        claimed.append(await responses_db.claim(conn, ids[len(claimed)], "worker-1", 30.0))

    assert await syncs_of(state, claim) < STATEMENTS // 2
    assert all(one is not None and one.record.status == "in_progress" for one in claimed)


async def test_the_token_paths_connections_plan_their_statements_once(state: AppState) -> None:
    held = HeldConnection(state.held_engine)
    try:
        async with held.use() as conn:
            assert await conn.scalar(text("SHOW plan_cache_mode")) == "force_generic_plan"
    finally:
        await held.close()
    async with state.engine.connect() as conn:  # requests' statements: planned as Postgres chooses
        assert await conn.scalar(text("SHOW plan_cache_mode")) == "auto"

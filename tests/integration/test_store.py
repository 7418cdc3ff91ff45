"""Foreground responses created at the same moment are stored together, by one statement, and a
response Postgres refuses fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app import errors
from app.service import storing
from app.service.state import AppState
from app.storage import responses as responses_db
from app.storage.tables import items, responses
from tests.integration.conftest import accept


async def stored_inputs(state: AppState, response_ids: list[str]) -> dict[str, object]:
    async with state.engine.connect() as conn:
        rows = await conn.execute(
            select(items.c.response_id, items.c.payload).where(items.c.response_id.in_(response_ids))
        )
    return {row.response_id: row.payload["content"][0]["text"] for row in rows}


async def test_responses_created_together_are_stored_together(
    state: AppState, account_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements: list[int] = []
    insert = responses_db.insert_responses

    async def counted(conn: AsyncConnection, new: list[responses_db.NewResponse], *claimant: Any) -> set[str]:
        statements.append(len(new))
        return await insert(conn, new, *claimant)

    monkeypatch.setattr(responses_db, "insert_responses", counted)
    ids = await asyncio.gather(*(accept(state, account_id, input=f"hello {i}") for i in range(20)))
    assert sum(statements) == 20 and len(statements) < 20  # some went together
    assert await stored_inputs(state, ids) == {rid: f"hello {i}" for i, rid in enumerate(ids)}


async def test_a_response_postgres_refuses_fails_alone(state: AppState, account_id: str) -> None:
    # Its account was deleted after its key was checked: the foreign key refuses it.
    together = [accept(state, account_id, input="fine") for _ in range(5)] + [accept(state, "acct_gone", input="x")]
    *fine, refused = await asyncio.gather(*together, return_exceptions=True)
    assert isinstance(refused, DBAPIError)
    assert all(isinstance(rid, str) for rid in fine)
    assert len(await stored_inputs(state, [str(rid) for rid in fine])) == 5
    async with state.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).where(responses.c.account_id == "acct_gone")) == 0


@pytest.mark.parametrize("background", [False, True])
async def test_a_previous_response_deleted_between_its_read_and_the_insert_is_not_found(
    state: AppState, account_id: str, monkeypatch: pytest.MonkeyPatch, background: bool
) -> None:
    """The answer is the one the request would have got a moment later, not an outage."""
    previous = await accept(state, account_id, input="first turn", store=True)
    async with state.engine.begin() as conn:
        await conn.execute(update(responses).where(responses.c.id == previous).values(status="completed"))
    read_link = storing.chain_link

    async def deleted_after_the_read(*args: Any) -> responses_db.ChainLink:
        link = await read_link(*args)
        async with state.engine.begin() as conn:  # another request deletes it, and commits
            assert await responses_db.delete_response(conn, previous, account_id) == "completed"
        return link

    monkeypatch.setattr(storing, "chain_link", deleted_after_the_read)
    before = await responses_of(state, account_id)
    with pytest.raises(errors.InvalidRequest) as refused:
        await accept(state, account_id, input="second turn", previous_response_id=previous, background=background)
    assert (refused.value.param, refused.value.code) == ("previous_response_id", "previous_response_not_found")
    assert await responses_of(state, account_id) == before - {previous}  # nothing of the refused request


async def responses_of(state: AppState, account_id: str) -> set[str]:
    async with state.engine.connect() as conn:
        return set((await conn.execute(select(responses.c.id).where(responses.c.account_id == account_id))).scalars())

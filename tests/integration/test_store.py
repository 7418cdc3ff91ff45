"""Foreground responses created at the same moment are stored together, by one statement, and a
response Postgres refuses fails alone. A foreground response its worker stores (its own
statement) is stored as its API would store it, but claimed, and once."""

from __future__ import annotations

import asyncio
import dataclasses
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
from tests.integration.conftest import accept, built


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

    async def counted(conn: AsyncConnection, new: list[responses_db.NewResponse]) -> set[str]:
        statements.append(len(new))
        return await insert(conn, new)

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


async def test_a_response_its_worker_stores_is_stored_as_its_api_stores_it_but_claimed(
    state: AppState, account_id: str
) -> None:
    # A foreground response that starts afresh, as its API would store it and as its worker does
    # (its own statement: app/service/enqueueing.py).
    said = [{"role": "user", "content": said} for said in ("one", "two")]
    body = {"model": "fake", "input": said, "instructions": "be brief", "metadata": {"k": "v"}}
    by_api, by_worker = [await built(state, account_id, {**body, "stream": stream}) for stream in (False, True)]
    claimant = responses_db.Claimant("worker-1", 30.0)
    async with state.engine.begin() as conn:
        assert await responses_db.insert_responses(conn, [by_api]) == {by_api.record.id}
        assert await responses_db.insert_claimed(conn, [by_worker], claimant) == {by_worker.record.id}
        rows = {
            row.id: row._asdict()
            for row in await conn.execute(
                select(responses, func.now().label("now")).where(
                    responses.c.id.in_([by_api.record.id, by_worker.record.id])
                )
            )
        }
        stored_items = await conn.execute(
            select(items).where(items.c.response_id.in_(rows)).order_by(items.c.response_id, items.c.position)
        )
        input_of: dict[str, list[tuple[Any, ...]]] = {}
        for item in stored_items:
            input_of.setdefault(item.response_id, []).append(
                (item.side, item.position, item.type, item.payload, item.depth, item.branch_id)
            )
    api_row, worker_row = rows[by_api.record.id], rows[by_worker.record.id]
    assert api_row["status"] == "queued" and api_row["worker_id"] is None and api_row["lease_expires_at"] is None
    assert worker_row["status"] == "in_progress" and worker_row["worker_id"] == "worker-1"
    assert worker_row["started_at"] == worker_row["now"]
    assert (worker_row["lease_expires_at"] - worker_row["now"]).total_seconds() == 30.0
    # Each starts a branch of its own, at depth 0.
    assert len(api_row["context_branches"]) == len(worker_row["context_branches"]) == 1
    assert api_row["context_branches"] != worker_row["context_branches"]
    assert api_row["context_depths"] == worker_row["context_depths"] == [0]
    different = {"id", "log_key", "created_at", "status", "worker_id", "started_at", "lease_expires_at"}
    different |= {"context_branches", "stream", "settings", "now"}
    assert {k: v for k, v in api_row.items() if k not in different} == {
        k: v for k, v in worker_row.items() if k not in different
    }
    assert worker_row["stream"] and not api_row["stream"]
    assert worker_row["created_at"].timestamp() == pytest.approx(by_worker.record.created_at, abs=1e-5)
    assert worker_row["settings"] == by_worker.record.settings
    for row in (api_row, worker_row):  # its input, on its own branch at depth 0
        branch = row["context_branches"][0]
        assert input_of[row["id"]] == [
            ("input", position, "message", {**message, "status": "completed"}, 0, branch)
            for position, message in enumerate(
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]}
                for t in ("one", "two")
            )
        ]


async def test_a_response_its_worker_stores_again_is_left_as_it_was(state: AppState, account_id: str) -> None:
    new = await built(state, account_id, {"model": "fake", "input": "hi", "stream": True})
    async with state.engine.begin() as conn:
        assert await responses_db.insert_claimed(conn, [new], responses_db.Claimant("worker-1", 30.0)) == {
            new.record.id
        }
        assert await responses_db.insert_claimed(conn, [new], responses_db.Claimant("worker-2", 30.0)) == set()
        assert await conn.scalar(select(responses.c.worker_id).where(responses.c.id == new.record.id)) == "worker-1"
        assert (
            await conn.scalar(select(func.count()).select_from(items).where(items.c.response_id == new.record.id)) == 1
        )


@pytest.mark.parametrize(
    ("body", "link"),
    [
        ({"model": "fake", "input": "hi", "background": True}, None),
        ({"model": "fake", "input": "hi", "store": False}, None),
        ({"model": "fake", "input": "hi"}, responses_db.ChainLink("resp_before", 1)),
    ],
    ids=["background", "unstored", "continuing"],
)
async def test_the_workers_insert_refuses_a_response_it_does_not_store(
    state: AppState, account_id: str, body: dict[str, Any], link: responses_db.ChainLink | None
) -> None:
    new = await built(state, account_id, body)
    if link is not None:
        new = dataclasses.replace(new, link=link)
    async with state.engine.begin() as conn:
        with pytest.raises(ValueError, match="does not start afresh"):
            await responses_db.insert_claimed(conn, [new], responses_db.Claimant("worker-1", 30.0))
        assert await conn.scalar(select(func.count()).where(responses.c.id == new.record.id)) == 0

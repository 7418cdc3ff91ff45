"""Chains stored as branches (docs/architecture.md, "Chains"): every response's context is its
ancestors' turns and its own input, whatever was continued twice, deleted, or created at the
same moment; input_items pages walk it with cursors that stay valid."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import pytest

from app import errors
from app.protocol.lifecycle import terminal_event
from app.service import reading
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from tests.integration.conftest import accept


async def turn(state: AppState, account_id: str, text: str, previous: str | None = None) -> str:
    """A stored turn answered "re: <text>", ended as a worker ends one."""
    response_id = await accept(state, account_id, input=text, previous_response_id=previous, background=True)
    answer = {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": f"re: {text}", "annotations": []}],
    }
    async with state.engine.begin() as conn:
        record = await responses_db.get_record(conn, response_id)
        assert record is not None
        outcome = responses_db.Outcome("completed", items_db.with_new_ids([answer]), time.time())
        assert await events_db.end(conn, response_id, [terminal_event(outcome.applied_to(record))], outcome)
    return response_id


async def chain(state: AppState, account_id: str, texts: list[str], previous: str | None = None) -> list[str]:
    ids = []
    for text in texts:
        previous = await turn(state, account_id, text, previous)
        ids.append(previous)
    return ids


def texts_of(context: list[dict[str, Any]]) -> list[str]:
    return [item["content"][0]["text"] if isinstance(item["content"], list) else item["content"] for item in context]


async def context_texts(state: AppState, response_id: str, own_output: bool = False) -> list[str]:
    async with state.engine.connect() as conn:
        return texts_of(await items_db.context_items(conn, response_id, own_output=own_output))


async def page(
    state: AppState,
    account_id: str,
    response_id: str,
    order: Literal["asc", "desc"] = "asc",
    limit: int = 100,
    after: str | None = None,
    before: str | None = None,
) -> dict[str, Any]:
    return await reading.input_items(
        state, account_id, response_id, order=order, limit=limit, after=after, before=before
    )


async def walk(
    state: AppState, account_id: str, response_id: str, order: Literal["asc", "desc"], limit: int
) -> list[dict[str, Any]]:
    """Every input item, page by page, each page starting after the last one's last item."""
    walked: list[dict[str, Any]] = []
    after = None
    while True:
        listing = await page(state, account_id, response_id, order, limit, after=after)
        walked += listing["data"]
        if not listing["has_more"]:
            return walked
        after = listing["last_id"]


def conversation(*texts: str) -> list[str]:
    """The context of a chain of turns `texts`, the last one's answer left out."""
    return [t for text in texts for t in (text, f"re: {text}")][:-1]


async def test_a_deep_chain_pages_the_same_in_both_orders(state: AppState, account_id: str) -> None:
    turns = [f"t{n}" for n in range(120)]
    ids = await chain(state, account_id, turns)
    async with state.engine.connect() as conn:
        context = await items_db.context_items(conn, ids[-1])
    assert texts_of(context) == conversation(*turns)
    for limit in (1, 7, 100):
        assert await walk(state, account_id, ids[-1], "asc", limit) == context
        assert await walk(state, account_id, ids[-1], "desc", limit) == context[::-1]


async def test_cursors_anywhere_in_a_deep_chain_bound_the_page(state: AppState, account_id: str) -> None:
    turns = [f"d{n}" for n in range(60)]
    ids = await chain(state, account_id, turns)
    context = [item["id"] for item in await walk(state, account_id, ids[-1], "asc", 100)]
    for n in (0, 1, 58, 59, 60, 117, 118):
        after = await page(state, account_id, ids[-1], "asc", 5, after=context[n])
        assert [i["id"] for i in after["data"]] == context[n + 1 : n + 6]
        assert after["has_more"] == (n + 6 < len(context))
        before = await page(state, account_id, ids[-1], "desc", 5, after=context[n])
        assert [i["id"] for i in before["data"]] == context[max(0, n - 5) : n][::-1]
        between = await page(state, account_id, ids[-1], "asc", 100, after=context[0], before=context[n])
        assert [i["id"] for i in between["data"]] == context[1:n][:100]
        assert between["has_more"] == (n > 101)


async def test_pages_of_a_turn_stay_the_same_while_its_chain_goes_on(state: AppState, account_id: str) -> None:
    ids = await chain(state, account_id, ["a", "b", "c"])
    first = await page(state, account_id, ids[-1], "asc", 2)
    await chain(state, account_id, ["d", "e"], previous=ids[-1])
    await chain(state, account_id, ["x"], previous=ids[0])  # and a branch from its start
    assert await page(state, account_id, ids[-1], "asc", 2) == first
    rest = await page(state, account_id, ids[-1], "asc", 10, after=first["last_id"])
    assert texts_of(first["data"] + rest["data"]) == conversation("a", "b", "c")


async def test_continuing_one_response_twice_makes_two_branches(state: AppState, account_id: str) -> None:
    a, b = await chain(state, account_id, ["a", "b"])
    c, d = await chain(state, account_id, ["c", "d"], previous=a)  # a second continuation of a
    e = await turn(state, account_id, "e", b)
    f = await turn(state, account_id, "f", c)  # a second branch of the second branch
    g = await turn(state, account_id, "g", a)  # a third continuation of a
    assert await context_texts(state, d) == conversation("a", "c", "d")
    assert await context_texts(state, e) == conversation("a", "b", "e")
    assert await context_texts(state, f) == conversation("a", "c", "f")
    assert await context_texts(state, g) == conversation("a", "g")
    assert await context_texts(state, b, own_output=True) == [*conversation("a", "b"), "re: b"]
    for response_id, expected in ((d, ("a", "c", "d")), (e, ("a", "b", "e")), (f, ("a", "c", "f"))):
        assert texts_of(await walk(state, account_id, response_id, "desc", 2)) == conversation(*expected)[::-1]


async def test_continuations_of_one_response_created_together_each_see_their_own(
    state: AppState, account_id: str
) -> None:
    (parent,) = await chain(state, account_id, ["p"])
    texts = [f"c{n}" for n in range(12)]
    ids = await asyncio.gather(*(accept(state, account_id, input=t, previous_response_id=parent) for t in texts))
    for response_id, text in zip(ids, texts, strict=True):
        assert await context_texts(state, response_id) == conversation("p", text)
    # and each can go on from there
    grandchildren = await asyncio.gather(*(turn(state, account_id, f"{t}+", parent) for t in texts[:4]))
    for response_id, text in zip(grandchildren, texts[:4], strict=True):
        assert await context_texts(state, response_id) == conversation("p", f"{text}+")


async def test_a_deleted_middle_turn_leaves_every_branch_through_it(state: AppState, account_id: str) -> None:
    a, b, c = await chain(state, account_id, ["a", "b", "c"])
    x = await turn(state, account_id, "x", b)  # a branch from the turn about to be deleted
    async with state.engine.begin() as conn:
        assert await responses_db.delete_response(conn, b, account_id) == "completed"
    assert await context_texts(state, c) == conversation("a", "c")
    assert await context_texts(state, x) == conversation("a", "x")
    d = await turn(state, account_id, "d", c)
    y = await turn(state, account_id, "y", a)  # a continued before; this one branches
    assert await context_texts(state, d) == conversation("a", "c", "d")
    assert await context_texts(state, y) == conversation("a", "y")
    assert texts_of(await walk(state, account_id, d, "asc", 1)) == conversation("a", "c", "d")


async def test_a_cursor_from_another_branch_or_the_own_output_is_refused(state: AppState, account_id: str) -> None:
    a, b = await chain(state, account_id, ["a", "b"])
    c = await turn(state, account_id, "c", a)
    async with state.engine.connect() as conn:
        b_items = await items_db.context_items(conn, b, own_output=True)
        c_items = await items_db.context_items(conn, c, own_output=True)
    b_input, b_output = b_items[2], b_items[3]
    for foreign in (c_items[2]["id"], c_items[3]["id"], b_output["id"], "msg_unknown", "msg_\x00"):
        with pytest.raises(errors.InvalidRequest) as refused:
            await page(state, account_id, b, after=foreign)
        assert refused.value.param == "after"
    assert (await page(state, account_id, b, after=b_input["id"]))["data"] == []
    listing = await page(state, account_id, b, before=b_input["id"])
    assert texts_of(listing["data"]) == ["a", "re: a"]

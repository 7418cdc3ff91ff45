"""A worker's copies of the chains it serves: a turn reads only the items after its copy, a
deleted turn makes the copy read whole again, a fork takes the part of the copy it continues, and
the copies stay within their bound. Each read gives what a read without copies gives."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import text

from app.process.metrics import REGISTRY
from app.service import stopping
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from tests.integration.conftest import accept
from workers.caches.chain_contexts import ChainContexts


def read_from(source: str) -> float:
    return REGISTRY.get_sample_value("responses_worker_chain_items_total", {"source": source}) or 0.0


async def turn(state: AppState, account_id: str, said: str, answer: str, previous: str | None = None) -> str:
    """A response continuing `previous` (its input `said`), ended with the output `answer`."""
    response_id = await accept(state, account_id, input=said, previous_response_id=previous)
    content = [{"type": "output_text", "text": answer, "annotations": []}]
    output = {"id": f"msg_{answer}_{time.monotonic_ns()}", "type": "message", "role": "assistant", "content": content}
    async with state.engine.begin() as conn:
        ended = responses_db.Outcome("completed", [output], time.time())
        assert await events_db.end(conn, response_id, [{"type": "response.completed"}], ended)
    return response_id


async def read(state: AppState, copies: ChainContexts, *response_ids: str) -> dict[str, list[str]]:
    """Each response's context as the copies give it (the texts), checked against a plain read."""
    async with state.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT id, context_branches, context_depths FROM responses WHERE id = ANY(:ids)"),
            {"ids": list(response_ids)},
        )
        paths = {r.id: items_db.spans(r.context_branches, r.context_depths, own_output=False) for r in rows}
        found = await copies.read(conn, paths)
        assert found == await items_db.read_contexts(conn, paths)
    return {rid: [texts(item) for item in items] for rid, items in found.items()}


async def three_turns(state: AppState, account_id: str) -> tuple[str, str, str]:
    """Two ended turns (a → A, b → B) and a third continuing them (c), not claimed yet."""
    first = await turn(state, account_id, "a", "A")
    second = await turn(state, account_id, "b", "B", first)
    return first, second, await accept(state, account_id, input="c", previous_response_id=second)


def texts(item: dict[str, Any]) -> str:
    content = item["content"]
    return content if isinstance(content, str) else content[0]["text"]


async def test_a_turn_reads_only_the_items_after_its_copy(state: AppState, account_id: str) -> None:
    copies = ChainContexts(limit_bytes=1_000_000)
    first = await turn(state, account_id, "a", "A")
    second = await accept(state, account_id, input="b", previous_response_id=first)
    assert await read(state, copies, second) == {second: ["a", "A", "b"]}
    async with state.engine.begin() as conn:
        await conn.execute(text("UPDATE responses SET status = 'completed' WHERE id = :id"), {"id": second})
    third = await accept(state, account_id, input="c", previous_response_id=second)
    cached, fetched = read_from("cache"), read_from("postgres")
    assert await read(state, copies, third) == {third: ["a", "A", "b", "c"]}
    assert (read_from("cache") - cached, read_from("postgres") - fetched) == (3, 1)


async def test_a_deleted_turn_makes_the_copy_read_whole_again(state: AppState, account_id: str) -> None:
    copies = ChainContexts(limit_bytes=1_000_000)
    _, second, third = await three_turns(state, account_id)
    assert await read(state, copies, third) == {third: ["a", "A", "b", "B", "c"]}
    await stopping.delete(state, account_id, second)
    fetched = read_from("postgres")
    assert await read(state, copies, third) == {third: ["a", "A", "c"]}
    assert read_from("postgres") - fetched == 3


async def test_a_fork_takes_the_part_of_the_copy_it_continues(state: AppState, account_id: str) -> None:
    copies = ChainContexts(limit_bytes=1_000_000)
    first, _, deeper = await three_turns(state, account_id)
    assert await read(state, copies, deeper) == {deeper: ["a", "A", "b", "B", "c"]}
    again = await accept(state, account_id, input="b again", previous_response_id=first)  # a new branch
    cached = read_from("cache")
    assert await read(state, copies, again, deeper) == {again: ["a", "A", "b again"], deeper: ["a", "A", "b", "B", "c"]}
    assert read_from("cache") - cached == 5  # the first branch's, once for both


async def test_copies_stay_within_their_bound_and_without_room_nothing_is_kept(
    state: AppState, account_id: str
) -> None:
    chains = [await accept(state, account_id, input="a") for _ in range(3)]
    measure = ChainContexts(limit_bytes=1_000_000)
    await read(state, measure, chains[0])
    copies = ChainContexts(limit_bytes=2 * measure.bytes_kept)  # room for two of them
    await read(state, copies, chains[0], chains[1])
    await read(state, copies, chains[0])  # now the most recently used
    await read(state, copies, chains[2])  # the second goes
    assert copies.bytes_kept == 2 * measure.bytes_kept
    cached = read_from("cache")
    await read(state, copies, chains[0])
    await read(state, copies, chains[1])
    assert read_from("cache") - cached == 1

    none = ChainContexts(limit_bytes=0)
    await read(state, none, chains[0])
    cached = read_from("cache")
    assert await read(state, none, chains[0]) == {chains[0]: ["a"]}
    assert read_from("cache") == cached and none.bytes_kept == 0

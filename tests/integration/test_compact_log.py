"""The compact event log: a delta is stored as its text, a response that ended has its deltas
folded into runs, and every read gives back what was streamed, byte for byte
(app/storage/event_templates.py, app/storage/events.py, migration 0015)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import sqlalchemy.exc
from sqlalchemy import text

from app.protocol.encoding import WireEvent
from app.protocol.lifecycle import lifecycle_event
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import responses as responses_db
from tests.deltas import text_delta
from tests.integration.conftest import accept


async def streamed(state: AppState, response_id: str, batches: list[list[dict[str, Any]]]) -> list[WireEvent]:
    """Appends each batch in its own statement, as the event writer commits them; what went live."""
    live: list[WireEvent] = []
    for batch in batches:
        async with state.engine.begin() as conn:
            live += await events_db.append(conn, response_id, batch)
    return live


async def stored_rows(state: AppState, response_id: str) -> list[dict[str, Any]]:
    async with state.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT e.sequence_number, e.template, e.run_length, e.type, e.payload FROM event_log e "
                "JOIN responses r ON r.log_key = e.log_key WHERE r.id = :id ORDER BY e.sequence_number"
            ),
            {"id": response_id},
        )
        return [dict(row._mapping) for row in rows]


async def read_after(state: AppState, response_id: str, after: int) -> list[str]:
    async with state.engine.connect() as conn:
        return [e.json for e in await events_db.events_after(conn, response_id, after, None)]


async def test_deltas_are_stored_as_their_text_and_every_resume_reads_back_what_was_streamed(
    state: AppState, account_id: str
) -> None:
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    words = ["Hello", ", ", '"world"', " \u00e9\U0001f600", "\n", "", ',"delta":"x"']
    reasoning = {"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 1, "content_index": 0}
    batches = [[text_delta(w)] for w in words] + [[text_delta("a"), text_delta("b", output_index=2, item_id="msg_2")]]
    batches += [[{**reasoning, "delta": "think"}], [{**reasoning, "delta": "ing"}]]
    live = await streamed(state, response_id, batches)
    assert len(live) == len(words) + 4

    rows = [row for row in await stored_rows(state, response_id) if row["template"] is not None]
    # every delta compact: its row is its text's JSON and no more
    assert [orjson.loads(row["payload"]) for row in rows] == [*words, "a", "b", "think", "ing"]
    assert all(row["type"] is None for row in rows)
    opening = live[0].sequence_number  # response.created, …: stored whole
    assert len(await read_after(state, response_id, -1)) == opening + len(live)
    for after in range(opening - 1, opening + len(live)):
        assert await read_after(state, response_id, after) == [e.json for e in live][after + 1 - opening :]


async def test_a_delta_unlike_its_parts_template_is_stored_whole_and_reads_back_as_it_went(
    state: AppState, account_id: str
) -> None:
    # As a continuing worker might: another item at the same place, so another template's text.
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    live = await streamed(
        state, response_id, [[text_delta("one")], [text_delta("two", item_id="msg_other")], [text_delta("three")]]
    )
    rows = await stored_rows(state, response_id)
    templated = {row["sequence_number"]: row["template"] for row in rows}
    first, other, third = (event.sequence_number for event in live)
    assert templated[first] is not None and templated[third] == templated[first]
    assert templated[other] is None  # whole: its own text, its own type
    assert await read_after(state, response_id, first - 1) == [e.json for e in live]

    # And in one statement: the batch's first delta takes the template, the other is whole.
    both = await streamed(
        state, response_id, [[text_delta("x", output_index=3), text_delta("y", output_index=3, item_id="m")]]
    )
    assert await read_after(state, response_id, third) == [e.json for e in both]


async def test_a_delta_with_logprobs_is_stored_whole(state: AppState, account_id: str) -> None:
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    logprobs = [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]
    live = await streamed(state, response_id, [[text_delta("a", logprobs=logprobs)], [text_delta("b")]])
    rows = {row["sequence_number"]: row for row in await stored_rows(state, response_id)}
    assert rows[live[0].sequence_number]["template"] is None
    assert rows[live[1].sequence_number]["template"] is not None
    assert await read_after(state, response_id, live[0].sequence_number - 1) == [e.json for e in live]


async def test_deleting_a_response_deletes_its_log_and_templates(state: AppState, account_id: str) -> None:
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    await streamed(state, response_id, [[text_delta("a")], [text_delta("b")]])
    async with state.engine.begin() as conn:
        key = await conn.scalar(text("SELECT log_key FROM responses WHERE id = :id"), {"id": response_id})
        await conn.execute(text("UPDATE responses SET status = 'completed' WHERE id = :id"), {"id": response_id})
        assert await responses_db.delete_response(conn, response_id, account_id) is not None
    async with state.engine.connect() as conn:
        left = await conn.scalar(
            text(
                "SELECT (SELECT count(*) FROM event_log WHERE log_key = :key)"
                " + (SELECT count(*) FROM event_templates WHERE log_key = :key)"
            ),
            {"key": key},
        )
    assert left == 0


async def test_a_response_that_ends_has_its_deltas_folded_into_runs_and_reads_back_as_it_streamed(
    state: AppState, account_id: str
) -> None:
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    reasoning = {"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 0, "content_index": 0}
    logprobs = [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]
    big = "x" * (events_db.RUN_BYTES // 3)  # about three of them fill a run
    batches = [[{**reasoning, "delta": word}] for word in ("let", " me", " think")]
    batches += [[text_delta(w, output_index=1, item_id="msg_1")] for w in ["Hel", "lo", '"w\u00e9\U0001f600"']]
    batches += [[text_delta("p", output_index=1, item_id="msg_1", logprobs=logprobs)]]  # stored whole
    batches += [[text_delta(f"{n}{big}", output_index=1, item_id="msg_1") for n in range(7)]]
    batches += [[text_delta("tail", output_index=1, item_id="msg_1")]]
    live = await streamed(state, response_id, batches)
    closing = [text_delta("last", output_index=1, item_id="msg_1"), {"type": "response.completed"}]
    async with state.engine.begin() as conn:
        live += await events_db.end(conn, response_id, closing, responses_db.Outcome("completed", [], 0.0))
    assert len(live) == 3 + 3 + 1 + 7 + 1 + 2

    rows = await stored_rows(state, response_id)
    runs = [row for row in rows if row["template"] is not None]
    assert all(row["run_length"] is not None for row in runs)  # no delta left on a row of its own
    # reasoning; text before the whole delta; text after it, in runs of about RUN_BYTES
    lengths = [row["run_length"] for row in runs]
    assert lengths[:2] == [3, 3] and sum(lengths[2:]) == 7 + 2 and len(lengths) >= 2 + 3
    assert all(len(row["payload"]) < events_db.RUN_BYTES + len(big) for row in runs)
    opening = live[0].sequence_number
    for after in range(opening - 1, live[-1].sequence_number + 1):
        assert await read_after(state, response_id, after) == [e.json for e in live][after + 1 - opening :]
    async with state.engine.connect() as conn:
        viewed = await conn.scalars(
            text("SELECT payload FROM response_events WHERE response_id = :id ORDER BY sequence_number"),
            {"id": response_id},
        )
        assert list(viewed)[opening:] == [e.json for e in live]  # and so does the operators' view


async def test_two_writers_that_number_the_same_event_cannot_both_commit(state: AppState, account_id: str) -> None:
    """As a stalled worker's late commit and the reaper's, or a cancel's: the log's key refuses
    the second, so no event is numbered twice and nothing follows a terminal event."""
    response_id = await accept(state, account_id, input="hi", background=True, stream=True)
    async with state.engine.connect() as first:
        transaction = await first.begin()
        mine = await events_db.append(first, response_id, [text_delta("mine")])

        async def other_writer() -> None:
            async with state.engine.begin() as second:
                await events_db.append(second, response_id, [text_delta("theirs")])

        racing = asyncio.create_task(other_writer())
        await asyncio.sleep(0.3)
        assert not racing.done()  # it waits for the number the first one holds
        await transaction.commit()
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        await racing
    assert await read_after(state, response_id, mine[0].sequence_number - 1) == [e.json for e in mine]


async def test_a_commit_of_streaming_output_drops_the_events_of_a_response_that_ended_and_numbers_the_others(
    state: AppState, account_id: str
) -> None:
    """The statement that commits streaming output (no response ending in it) takes events only
    for active responses, each numbered after its own log: nothing follows a terminal event."""
    ended, streaming = [await accept(state, account_id, input="hi", background=True, stream=True) for _ in range(2)]
    async with state.engine.begin() as conn:
        closed = await events_db.end(
            conn, ended, [{"type": "response.completed"}], responses_db.Outcome("completed", [], 0.0)
        )
    async with state.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        committed = await events_db.append_many(
            conn, {ended: [text_delta("late")], streaming: [text_delta("a"), text_delta("b")]}
        )
    assert list(committed) == [streaming]
    assert [orjson.loads(e.json)["delta"] for e in committed[streaming]] == ["a", "b"]
    assert await read_after(state, ended, closed[-1].sequence_number) == []
    opening = committed[streaming][0].sequence_number
    assert await read_after(state, streaming, opening - 1) == [e.json for e in committed[streaming]]


async def test_an_opening_event_repeating_the_response_object_is_stored_once_and_reads_back_whole(
    state: AppState, account_id: str
) -> None:
    """A response's first two events carry the same response object: a background one's
    `created` and `queued` (stored by its create), a foreground one's `created` and `in_progress`
    (appended by its worker). The second is stored without it, and every read (a resume from any
    point, the operators' view, the log once folded) gives it back as it streamed."""
    tricky = {"a": 'x,"sequence_number":1}', "sequence_number": "\u00e9\U0001f600"}  # what a read must not look for
    for background in (True, False):
        response_id = await accept(state, account_id, input="hi", background=background, stream=True, metadata=tricky)
        async with state.engine.connect() as conn:
            record = await responses_db.get_record(conn, response_id, account_id)
        assert record is not None
        running = record.evolve(status="in_progress")
        worker_opens = [lifecycle_event("response.in_progress", running)]
        if not background:  # (a foreground response's create stores nothing)
            worker_opens.insert(0, lifecycle_event("response.created", running))
        everything = await read_after(state, response_id, -1)
        everything += [e.json for e in await streamed(state, response_id, [worker_opens, [text_delta("a")]])]
        kinds = [orjson.loads(e)["type"] for e in everything]
        second, third = ("response.queued", "response.in_progress") if background else (worker_opens[1]["type"], "")
        assert kinds[:3] == ["response.created", second, third or "response.output_text.delta"]
        rows = {row["sequence_number"]: row["payload"] for row in await stored_rows(state, response_id)}
        assert '"metadata"' in rows[0] and '"metadata"' not in rows[1]  # stored by reference to the first
        assert '"metadata"' in rows[2] or not background  # (background: in_progress differs from queued)
        for after in range(-1, len(everything)):
            assert await read_after(state, response_id, after) == everything[after + 1 :]

        closing = [{"type": "response.completed"}]
        async with state.engine.begin() as conn:
            ended = await events_db.end(conn, response_id, closing, responses_db.Outcome("completed", [], 0.0))
        everything += [e.json for e in ended]
        for after in range(-1, len(everything)):
            assert await read_after(state, response_id, after) == everything[after + 1 :]
        async with state.engine.connect() as conn:
            viewed = await conn.scalars(
                text("SELECT payload FROM response_events WHERE response_id = :id ORDER BY sequence_number"),
                {"id": response_id},
            )
            assert list(viewed) == everything

"""The event writer's pacing: under load, while a busy batch gathers, a response's first output
and its end are committed and published at once, and the deltas of responses already streaming
wait for the paced commit; with few streams, a commit that is due goes with the next events to
arrive, or a grace later. And its failures: a lost connection, a commit whose answer was lost,
data Postgres refuses."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from app.events.writer import EventWriter
from app.protocol.encoding import WireEvent
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.tables import response_events
from tests.conftest import FakeRuntime, within
from tests.integration.conftest import OpenWorker, accept, in_progress, run_job

PACE_SECONDS = 30.0  # far longer than the test: what is not urgent must not go out at all


def delta(text: str) -> dict[str, object]:
    return {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
    }


async def committed(state: AppState, response_id: str) -> int:
    async with state.engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(response_events).where(response_events.c.response_id == response_id)
        )
    return count or 0


async def until_committed(state: AppState, response_id: str, count: int) -> None:
    while await committed(state, response_id) < count:
        await asyncio.sleep(0.01)


async def test_first_output_and_endings_skip_the_pacing_others_wait(state: AppState, account_id: str) -> None:
    ids = await in_progress(state, account_id, 20)
    # Paced as under load: after a batch of 16 or more responses, the next waits PACE_SECONDS.
    writer = EventWriter(
        state.engine,
        state.redis,
        f"responses:events:test-writer-{secrets.token_hex(3)}",
        pause=lambda responses, _: PACE_SECONDS if responses >= 16 else 0.0,
    )
    writer.start()
    try:
        streaming, starting, ending = ids[0], ids[1], ids[2]
        for response_id in ids[:1] + ids[3:]:  # 18 responses stream: one big batch, then the pause
            writer.append(response_id, [delta("a")])
        for response_id in ids[:1] + ids[3:]:
            await within(until_committed(state, response_id, 1), 10)

        writer.append(streaming, [delta("b")])  # already streaming: waits for the paced commit
        writer.append(starting, [delta("first")])  # its first output: goes out now
        await within(until_committed(state, starting, 1), 10)
        outcome = responses_db.Outcome("completed", [], 0.0)
        ended = await within(writer.finish(ending, [{"type": "response.completed"}], outcome), 10)
        assert ended and await committed(state, ending) == 1

        assert await committed(state, streaming) == 1  # "b" still gathers
        writer.append(starting, [delta("second")])  # now streaming: it waits too
        await asyncio.sleep(0.3)
        assert await committed(state, starting) == 1
    finally:
        await writer.close()  # flushes what waited
    assert await committed(state, streaming) == 2
    assert await committed(state, starting) == 2


async def test_events_waited_for_are_committed_at_once_together(state: AppState, account_id: str) -> None:
    """An MCP call's opening, which its loop waits to see committed before it makes the call:
    it skips the pacing, and the waits of many loops share one commit."""
    ids = await in_progress(state, account_id, 8)
    writer = EventWriter(
        state.engine, state.redis, f"responses:events:test-writer-{secrets.token_hex(3)}", commit_interval=PACE_SECONDS
    )
    writer.start()
    try:
        for response_id in ids:  # streaming already: what follows waits for the paced commit
            writer.append(response_id, [delta("a")])
        async with asyncio.timeout(10):
            for response_id in ids:
                await until_committed(state, response_id, 1)
        batches = writer.batches
        for response_id in ids:
            writer.append(
                response_id, [{"type": "response.mcp_call.in_progress", "item_id": "mcp_1", "output_index": 1}]
            )
        async with asyncio.timeout(5):  # not the 30 s pace
            assert all(await asyncio.gather(*(writer.committed(response_id) for response_id in ids)))
        assert [await committed(state, response_id) for response_id in ids] == [2] * len(ids)
        assert writer.batches - batches == 1
        assert await writer.committed(ids[0])  # nothing waits: at once
    finally:
        await writer.close()


def paced_writer(state: AppState, commit_interval: float) -> EventWriter:
    channel = f"responses:events:test-writer-{secrets.token_hex(3)}"
    return EventWriter(state.engine, state.redis, channel, commit_interval=commit_interval)


@asynccontextmanager
async def running_writer(state: AppState, commit_interval: float) -> AsyncIterator[EventWriter]:
    """A paced writer, started, and closed after (which flushes what waited)."""
    writer = paced_writer(state, commit_interval)
    writer.start()
    try:
        yield writer
    finally:
        await writer.close()


async def test_a_due_commit_goes_with_the_next_events_to_arrive(state: AppState, account_id: str) -> None:
    """Not on a timer of its own at the commit interval: the events that arrive once it is due
    take the waiting ones along (a grace of half an interval later at the latest)."""
    interval = 3.0
    [response_id] = await in_progress(state, account_id, 1)
    writer = paced_writer(state, interval)
    writer.start()
    try:
        writer.append(response_id, [delta("a")])  # its first output: at once
        await within(until_committed(state, response_id, 1), 10)
        first_commit = asyncio.get_running_loop().time()
        writer.append(response_id, [delta("b")])  # waits for the interval
        await asyncio.sleep(interval + 0.3 - (asyncio.get_running_loop().time() - first_commit))
        assert await committed(state, response_id) == 1  # due, but nothing arrived to take it along
        writer.append(response_id, [delta("c")])
        await within(until_committed(state, response_id, 2), 0.6)  # before the grace ends
    finally:
        await writer.close()
    async with state.engine.connect() as conn:
        deltas = await conn.scalars(
            select(response_events.c.payload)
            .where(response_events.c.response_id == response_id, response_events.c.type.like("%delta"))
            .order_by(response_events.c.sequence_number)
        )
        assert [json.loads(payload)["delta"] for payload in deltas] == ["a", "bc"]  # b and c: one event


async def test_output_after_a_first_output_still_being_committed_waits_for_the_paced_commit(
    state: AppState, account_id: str
) -> None:
    """Only the first output is urgent, even when what follows it arrives while that first
    output's commit is still under way (held here by a lock on the event log)."""
    [response_id] = await in_progress(state, account_id, 1)
    writer = paced_writer(state, PACE_SECONDS)
    writer.start()
    try:
        async with state.engine.begin() as blocker, state.engine.connect() as watcher:
            await blocker.execute(text("LOCK TABLE event_log IN EXCLUSIVE MODE"))
            writer.append(response_id, [delta("a")])  # its first output: its commit waits for the lock
            waiting = text("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'event_log'::regclass")
            while not await watcher.scalar(waiting):
                await asyncio.sleep(0.01)
            writer.append(response_id, [delta("b")])
        await within(until_committed(state, response_id, 1), 10)
        await asyncio.sleep(0.5)
        assert await committed(state, response_id) == 1  # "b" gathers for the paced commit
    finally:
        await writer.close()
    assert await committed(state, response_id) == 2


OPENING = [{"type": "response.created"}, {"type": "response.in_progress"}]


async def test_opening_events_go_in_the_first_outputs_commit(state: AppState, account_id: str) -> None:
    [response_id] = await in_progress(state, account_id, 1)
    async with running_writer(state, PACE_SECONDS) as writer:
        writer.open(response_id, OPENING)
        await asyncio.sleep(0.3)
        assert await committed(state, response_id) == 0  # waiting for the first output
        writer.append(response_id, [delta("a")])
        await within(until_committed(state, response_id, 3), 10)
        assert writer.batches == 1  # one commit for the three


async def test_opening_events_go_alone_after_a_commit_interval_without_output(state: AppState, account_id: str) -> None:
    """A slow prefill, or an answer that starts with a tool call: its client still sees it start."""
    [response_id, ending] = await in_progress(state, account_id, 2)
    async with running_writer(state, 0.5) as writer:
        writer.open(response_id, OPENING)
        writer.open(ending, OPENING)
        await asyncio.sleep(0.2)
        assert await committed(state, response_id) == 0
        outcome = responses_db.Outcome("completed", [], 0.0)  # an end does not wait: nor do they
        assert await within(writer.finish(ending, [{"type": "response.completed"}], outcome), 10)
        assert await committed(state, ending) == 3
        await within(until_committed(state, response_id, 2), 5)  # after the interval, with nothing else


async def test_without_a_commit_interval_opening_events_go_at_once(state: AppState, account_id: str) -> None:
    [response_id] = await in_progress(state, account_id, 1)
    async with running_writer(state, 0.0) as writer:
        writer.open(response_id, OPENING)
        await within(until_committed(state, response_id, 2), 10)


async def test_a_due_commit_goes_a_grace_later_when_nothing_more_arrives(state: AppState, account_id: str) -> None:
    [response_id] = await in_progress(state, account_id, 1)
    async with running_writer(state, 0.1) as writer:
        writer.append(response_id, [delta("a")])
        await within(until_committed(state, response_id, 1), 10)
        writer.append(response_id, [delta("b")])  # its answer's last delta, say, before a slow end
        await within(until_committed(state, response_id, 2), 10)


async def test_the_writer_commits_through_a_fresh_connection_after_postgres_dropped_its_own(
    state: AppState, account_id: str
) -> None:
    (response_id,) = await in_progress(state, account_id, 1)
    name = f"writer-{secrets.token_hex(3)}"  # marks the writer's backends, to drop exactly those
    engine = create_async_engine(
        state.settings.database_url, connect_args={"server_settings": {"application_name": name}}
    )
    writer = EventWriter(engine, state.redis, f"responses:events:test-{name}")
    writer.start()
    try:
        writer.append(response_id, [delta("a")])
        await within(until_committed(state, response_id, 1), 10)
        async with state.engine.connect() as conn:
            dropped = await conn.scalar(
                text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": name},
            )
        assert dropped == 1
        writer.append(response_id, [delta("b"), {"type": "response.content_part.done"}])
        await within(until_committed(state, response_id, 3), 10)
    finally:
        await writer.close()
        await engine.dispose()


def message_with(text: str) -> dict[str, object]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": content}


async def test_events_postgres_refuses_stop_their_own_response_at_once_and_no_other(
    state: AppState, account_id: str
) -> None:
    """An ending Postgres cannot store (a NUL in its error, a jsonb column) shares a batch with
    another response's events. It used to hold up every commit of the writer for a minute, then
    fail the whole batch."""
    good, bad = await in_progress(state, account_id, 2)
    writer = EventWriter(state.engine, state.redis, f"responses:events:test-writer-{secrets.token_hex(3)}")
    stopped: list[str] = []
    writer.on_dropped = stopped.append
    error = {"code": "server_error", "message": "a\x00"}
    unstorable = responses_db.Outcome("failed", [message_with("a")], 0.0, error=error)
    writer.append(good, [delta("a")])
    finishing = asyncio.create_task(writer.finish(bad, [{"type": "response.completed"}], unstorable))
    await asyncio.sleep(0)  # both wait for the first flush: one batch
    writer.start()
    try:
        assert await within(finishing, 10) is False
        assert writer.refused(bad) and stopped == [bad]
        assert await committed(state, good) == 1 and await committed(state, bad) == 0
        writer.append(bad, [delta("late")])  # dropped: its generation is being stopped
        writer.append(good, [delta("b")])
        await within(until_committed(state, good, 2), 10)
        assert await committed(state, bad) == 0
        # Its generation then ends it without what was refused.
        failed = responses_db.Outcome("failed", [], 0.0, error={"code": "server_error", "message": "unstorable"})
        assert await within(writer.finish(bad, [{"type": "response.failed"}], failed), 10)
        assert not writer.refused(bad)
    finally:
        await writer.close()
    async with state.engine.connect() as conn:
        row = await responses_db.get_row(conn, bad)
    assert row is not None and row.status == "failed" and await committed(state, bad) == 1


async def test_a_generation_whose_output_postgres_refuses_ends_failed_beside_one_that_completes(
    state: AppState, account_id: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    worker = await open_worker()
    bad = await accept(state, account_id, input="#fake " + json.dumps({"chunks": ["poi", "son"]}))
    good = await accept(state, account_id, input="hello")
    # A poison nothing before Postgres knows: a rule of this database's alone, refusing the item.
    async with state.engine.begin() as conn:
        await conn.execute(
            text("ALTER TABLE items ADD CONSTRAINT poison CHECK (payload::text NOT LIKE '%poison%') NOT VALID")
        )
    try:
        await within(asyncio.gather(run_job(worker, bad), run_job(worker, good)), 20)
    finally:
        async with state.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE items DROP CONSTRAINT poison"))
    async with state.engine.connect() as conn:
        bad_row, good_row = [await responses_db.get_row(conn, rid) for rid in (bad, good)]
        last_type = await conn.scalar(
            select(response_events.c.type)
            .where(response_events.c.response_id == bad)
            .order_by(response_events.c.sequence_number.desc())
            .limit(1)
        )
    assert bad_row is not None and good_row is not None
    assert (bad_row.status, bad_row.error["message"]) == ("failed", "The response's output could not be stored.")
    assert last_type == "response.failed"  # its followers are told
    assert good_row.status == "completed"


@pytest.mark.parametrize("lost", ["a", "b"])  # the response's first commit, a later one
async def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    state: AppState, account_id: str, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """The statement ran and committed, but its answer never came (the connection broke, the
    primary failed over once its standby had it): the writer, trying again, finds its events in
    the log as they were numbered and takes them as committed."""
    (response_id,) = await in_progress(state, account_id, 1)
    writer = EventWriter(state.engine, state.redis, f"responses:events:test-writer-{secrets.token_hex(3)}")
    writer.expect(response_id, 0)  # (as the job tells it: a foreground response's log starts empty)
    commit = events_db.append_many
    answers_lost = 0

    async def answer_lost_once(*args: Any, **kwargs: Any) -> dict[str, list[WireEvent]]:
        nonlocal answers_lost
        numbered = await commit(*args, **kwargs)
        if delta(lost) in args[1].get(response_id, []) and not answers_lost:
            answers_lost += 1
            raise OperationalError(
                "INSERT …", {}, ConnectionResetError("the answer was lost"), connection_invalidated=True
            )
        return numbered

    monkeypatch.setattr(events_db, "append_many", answer_lost_once)
    writer.start()
    try:
        writer.append(response_id, [delta("a")])
        await within(until_committed(state, response_id, 1), 10)
        writer.append(response_id, [delta("b")])
        await within(until_committed(state, response_id, 2), 10)
        writer.append(response_id, [delta("c")])
        await within(until_committed(state, response_id, 3), 10)
    finally:
        await writer.close()
    assert answers_lost == 1
    async with state.engine.connect() as conn:
        logged = await events_db.events_after(conn, response_id, -1, None)
    deltas = [json.loads(event.json)["delta"] for event in logged]
    assert deltas == ["a", "b", "c"]  # "b" once
    assert [event.sequence_number for event in logged] == [0, 1, 2]


async def test_a_continuations_first_commit_whose_answer_was_lost_is_not_written_twice(
    state: AppState, account_id: str, open_worker: OpenWorker, monkeypatch: pytest.MonkeyPatch, fake: FakeRuntime
) -> None:
    """A generation handed over mid-answer: the worker continuing it knows where its log ends
    before its first commit, so that commit too is recognized should its answer be lost."""
    words = [f"w{i}" for i in range(30)]
    script = "#fake " + json.dumps({"text": " ".join(words), "delay": 0.05})
    response_id = await accept(state, account_id, model="continuing-model", input=script)
    first, second = await open_worker(), await open_worker()
    running = asyncio.create_task(run_job(first, response_id))
    await within(until_committed(state, response_id, 8), 10)
    running.cancel()  # (its worker shutting down: the generation is handed over)
    await asyncio.gather(running, return_exceptions=True)
    commit = events_db.append_many
    answers_lost = 0

    async def first_answer_lost(*args: Any, **kwargs: Any) -> dict[str, list[WireEvent]]:
        nonlocal answers_lost
        numbered = await commit(*args, **kwargs)
        if response_id in args[1] and not answers_lost:
            answers_lost += 1
            raise OperationalError(
                "INSERT …", {}, ConnectionResetError("the answer was lost"), connection_invalidated=True
            )
        return numbered

    monkeypatch.setattr(events_db, "append_many", first_answer_lost)
    await within(run_job(second, response_id), 20)
    assert answers_lost == 1
    async with state.engine.connect() as conn:
        row = await responses_db.get_row(conn, response_id)
        logged = await events_db.events_after(conn, response_id, -1, None)
    assert row is not None and row.status == "completed" and row.continuations == 1
    assert [event.sequence_number for event in logged] == list(range(len(logged)))
    text = "".join(json.loads(e.json)["delta"] for e in logged if e.type == "response.output_text.delta")
    assert text == " ".join(words)  # no piece twice


async def test_handing_the_writer_no_events_does_not_stop_the_generation(state: AppState, account_id: str) -> None:
    """A step that closes nothing (an answer whose only call was refused and asked again) hands
    the writer an empty list: that is not a response that ended elsewhere."""
    [response_id] = await in_progress(state, account_id, 1)
    writer = paced_writer(state, 0.0)
    dropped: list[str] = []
    writer.on_dropped = dropped.append
    writer.start()
    try:
        writer.append(response_id, [])
        await asyncio.sleep(0.2)  # (a flush would have come and gone)
        writer.append(response_id, [delta("after")])
        await within(until_committed(state, response_id, 1), 10)
    finally:
        await writer.close()
    assert dropped == []

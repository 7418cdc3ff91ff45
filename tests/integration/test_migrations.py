"""The migrations are the schema: `upgrade head` on an empty database matches app/storage/tables.py,
and `downgrade base` removes everything it made."""

from __future__ import annotations

import asyncio
import datetime
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from app.housekeeping import log_partitions
from app.protocol.response_object import ResponseRecord
from app.settings import Settings
from app.storage import responses as responses_db
from app.storage.migrate import migrate
from app.storage.tables import described_here, metadata
from tests.conftest import admin_sql


@pytest.fixture
def empty_database_url() -> Iterator[str]:
    name = f"rs_migration_{secrets.token_hex(4)}"
    admin_sql(f'CREATE DATABASE "{name}"')
    yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    admin_sql(f'DROP DATABASE "{name}" WITH (FORCE)')


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection, opts={"compare_server_default": True, "include_object": described_here}
    )
    return list(compare_metadata(context, metadata))


async def test_upgrade_head_matches_the_table_definitions(empty_database_url: str) -> None:
    settings = Settings(DATABASE_URL=empty_database_url)
    await _in_thread(migrate, settings)
    engine = create_async_engine(empty_database_url)
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []
        tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        today = (await conn.execute(text("SELECT floor(extract(epoch FROM now()) / 86400)::bigint"))).scalar_one()
        partitions = {
            *("event_log_default", "event_log_live"),
            *(log_partitions.partition_name(today + n) for n in range(3)),
        }
        assert partitions <= tables  # today's and the next two days', made ahead
        assert tables - partitions == {
            *("accounts", "api_keys", "responses", "items", "event_log", "event_templates", "output_snapshots"),
            "alembic_version",
            *("conversations", "conversation_items"),
            *("webhook_endpoints", "webhook_deliveries", "idempotency_keys", "response_steers"),
            *("files", "file_pieces", "vector_stores", "vector_store_files", "vector_store_file_batches", "chunks"),
            *("operator_keys", "console_sessions"),
        }
        assert (await conn.execute(text("SELECT count(*) FROM response_overview"))).scalar() == 0
        days = await conn.execute(text("SELECT partition, day FROM event_log_days ORDER BY day"))
        assert [(name, (day - datetime.date(1970, 1, 1)).days) for name, day in days] == [
            (log_partitions.partition_name(today + n), today + n) for n in range(3)
        ]
        comment = (await conn.execute(text("SELECT obj_description('responses'::regclass)"))).scalar()
        assert comment and "items and events hang off it" in comment
        # as tables.py asks: room for in-place updates of a streaming response's sequence counter
        options = (await conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'responses'"))).scalar()
        assert options == ["fillfactor=70"]
    await engine.dispose()


async def test_downgrade_base_removes_everything(empty_database_url: str) -> None:
    from alembic import command

    settings = Settings(DATABASE_URL=empty_database_url)
    await _in_thread(migrate, settings)
    config = _alembic_config(empty_database_url)
    await _in_thread(command.downgrade, config, "base")
    engine = create_async_engine(empty_database_url)
    async with engine.connect() as conn:
        tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    await engine.dispose()
    assert tables == {"alembic_version"}


def _alembic_config(database_url: str) -> Config:
    import migrations

    config = Config()
    config.set_main_option("script_location", migrations.__path__[0])
    config.set_main_option("sqlalchemy.url", database_url)
    return config


async def _viewed(conn: Any, response_id: str) -> list[str]:
    """A response's events as the operators' view `response_events` puts them back."""
    view = text("SELECT payload FROM response_events WHERE response_id = :id ORDER BY sequence_number")
    return [*(await conn.scalars(view, {"id": response_id}))]


async def _in_thread(function: Callable[..., None], *args: object) -> None:
    # Alembic's env.py runs its own event loop, which cannot nest inside the test's.
    await asyncio.to_thread(function, *args)


async def test_settings_stored_before_0005_survive_the_change_to_json(empty_database_url: str) -> None:
    from alembic import command

    config = _alembic_config(empty_database_url)
    await _in_thread(command.upgrade, config, "0004")
    engine = create_async_engine(empty_database_url)
    settings = '{"text": {"format": {"type": "text"}}, "tools": [], "temperature": 0.5}'
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        await conn.execute(
            text(
                "INSERT INTO responses (id, account_id, model, background, stream, settings) "
                "VALUES ('resp_1', 'acct_1', 'm', false, false, CAST(:settings AS jsonb))"
            ),
            {"settings": settings},
        )
    await _in_thread(command.upgrade, config, "head")
    async with engine.connect() as conn:
        kind = (await conn.execute(text("SELECT pg_typeof(settings)::text FROM responses"))).scalar()
        stored = await conn.execute(text("SELECT settings::jsonb = CAST(:s AS jsonb) FROM responses"), {"s": settings})
        assert kind == "json" and stored.scalar() is True
    await engine.dispose()


async def test_chains_stored_before_0006_keep_their_contexts_as_branches(empty_database_url: str) -> None:
    """Before 0006, a context was walked through context_parent_id (relinked past deleted turns).
    After it, every response's context is the same, and new turns go on from any of them."""
    from alembic import command

    from app.storage import items as items_db

    config = _alembic_config(empty_database_url)
    await _in_thread(command.upgrade, config, "0005")
    engine = create_async_engine(empty_database_url)
    # a → b → c with b deleted (c relinked to a); a → x → y created later; a lone response z
    turns = [("a", None, 0), ("c", "a", 2), ("x", "a", 1), ("y", "x", 2), ("z", None, 0)]
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        for n, (name, parent, depth) in enumerate(turns):
            await conn.execute(
                text(
                    "INSERT INTO responses (id, account_id, model, status, background, stream, settings, "
                    "context_parent_id, chain_depth, created_at) VALUES (:id, 'acct_1', 'm', 'completed', false, "
                    "false, '{}', :parent, :depth, now() + make_interval(secs => :n))"
                ),
                {"id": name, "parent": parent, "depth": depth, "n": n},
            )
            for side in ("input", "output"):
                await conn.execute(
                    text(
                        "INSERT INTO items (id, response_id, side, position, type, payload) "
                        "VALUES (:id, :response, :side, 0, 'message', CAST(:payload AS jsonb))"
                    ),
                    {"id": f"{name}_{side}", "response": name, "side": side, "payload": '{"role": "user"}'},
                )
    await _in_thread(command.upgrade, config, "head")

    async def context_of(response_id: str) -> list[str]:
        async with engine.connect() as conn:
            return [item["id"] for item in await items_db.context_items(conn, response_id)]

    assert await context_of("c") == ["a_input", "a_output", "c_input"]
    assert await context_of("y") == ["a_input", "a_output", "x_input", "x_output", "y_input"]
    assert await context_of("z") == ["z_input"]
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, context_branches, branch_continued FROM responses ORDER BY id"))
        placed = {row.id: (row.context_branches, row.branch_continued) for row in rows}
    assert placed["c"][0] == placed["a"][0] and placed["a"][1] is True  # c continued a's branch
    assert placed["y"][0] == placed["x"][0] == placed["a"][0] + [placed["x"][0][-1]] != placed["c"][0]
    assert placed["c"][1] is False and placed["z"][1] is False
    async with engine.begin() as conn:  # new turns go on from the migrated ones
        await responses_db.insert_responses(conn, [_new_turn("d", "c", 3), _new_turn("w", "a", 1)])
    assert await context_of("d") == ["a_input", "a_output", "c_input", "c_output", "d_input"]
    assert await context_of("w") == ["a_input", "a_output", "w_input"]
    await engine.dispose()


def _new_turn(name: str, parent: str, depth: int) -> responses_db.NewResponse:
    record = ResponseRecord(name, "m", "queued", time.time(), None, parent, {}, {}, True, True, False)
    item = {"id": f"{name}_input", "type": "message", "role": "user", "content": name}
    return responses_db.NewResponse(record, "acct_1", responses_db.ChainLink(parent, depth), [item])


async def test_downgrade_from_0009_puts_the_left_out_output_back_into_the_events(empty_database_url: str) -> None:
    from alembic import command

    from app.storage import events as events_db
    from app.storage import output_refs
    from tests.unit.test_output_refs import answered

    config = _alembic_config(empty_database_url)
    await _in_thread(command.upgrade, config, "head")
    engine = create_async_engine(empty_database_url)
    events, output = answered("y" * output_refs.REFERENCE_FROM_BYTES, reasoning="because")
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        await conn.execute(
            text(
                "INSERT INTO responses (id, account_id, model, status, background, stream, settings, "
                "context_branches, context_depths) VALUES ('resp_1', 'acct_1', 'm', 'in_progress', true, true, "
                "'{}', ARRAY[nextval('branch_ids')], ARRAY[0])"
            )
        )
        sent = await events_db.end(conn, "resp_1", events, responses_db.Outcome("completed", output, time.time()))
        referring = await conn.scalar(text("SELECT count(output_at) FROM response_events"))
    assert referring == 7
    async with engine.connect() as conn:
        assert [e.json for e in await events_db.events_after(conn, "resp_1", -1, None)] == [e.json for e in sent]
    await _in_thread(command.downgrade, config, "0008")
    async with engine.connect() as conn:
        payloads = await conn.scalars(text("SELECT payload FROM response_events ORDER BY sequence_number"))
        assert list(payloads) == [e.json for e in sent]
    await engine.dispose()


async def test_event_logs_stored_before_0015_move_into_the_compact_log_and_back(empty_database_url: str) -> None:
    from alembic import command

    from app.storage import events as events_db

    config = _alembic_config(empty_database_url)
    await _in_thread(command.upgrade, config, "0014")
    engine = create_async_engine(empty_database_url)
    payloads = [
        '{"type":"response.created","sequence_number":0}',
        '{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,'
        '"delta":"hi","logprobs":[],"sequence_number":1}',
    ]
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        for name, created in (("resp_old", "now() - interval '3 days'"), ("resp_new", "now()")):
            await conn.execute(
                text(
                    "INSERT INTO responses (id, account_id, model, status, background, stream, settings, "
                    "context_branches, context_depths, next_sequence_number, created_at) VALUES "
                    f"(:id, 'acct_1', 'm', 'in_progress', true, true, '{{}}', ARRAY[nextval('branch_ids')], "
                    f"ARRAY[0], 2, {created})"
                ),
                {"id": name},
            )
            for number, payload in enumerate(payloads):
                await conn.execute(
                    text(
                        "INSERT INTO response_events (response_id, sequence_number, type, payload) "
                        "VALUES (:id, :n, CAST(:payload AS json) ->> 'type', :payload)"
                    ),
                    {"id": name, "n": number, "payload": payload},
                )
    await _in_thread(command.upgrade, config, "0022")  # (0023 moves the running logs to the live partition)
    async with engine.begin() as conn:
        for name in ("resp_old", "resp_new"):  # (the service's reads need 0024's function: the view's read)
            assert await _viewed(conn, name) == payloads
        days = await conn.execute(text("SELECT id, log_key >> 32 AS day FROM responses ORDER BY id"))
        by_day = {str(row.id): int(row.day) for row in days}
        assert by_day["resp_new"] - by_day["resp_old"] == 3  # the key tells the day it was created
    await _in_thread(command.upgrade, config, "head")
    async with engine.begin() as conn:
        more = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}
        added = await events_db.append(conn, "resp_new", [{**more, "delta": " there", "logprobs": []}])
        assert added[0].sequence_number == 2
        # resp_old ends: its deltas are folded into a run
        closing: list[dict[str, Any]] = [{**more, "delta": "!", "logprobs": []}, {"type": "response.completed"}]
        ended = await events_db.end(conn, "resp_old", closing, responses_db.Outcome("completed", [], time.time()))
        assert await conn.scalar(text("SELECT count(run_length) FROM event_log")) == 1
    await _in_thread(command.downgrade, config, "0014")
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT response_id, payload FROM response_events ORDER BY 1, sequence_number"))
        assert [tuple(row) for row in rows] == [
            *(("resp_new", p) for p in [*payloads, added[0].json]),
            *(("resp_old", p) for p in [*payloads, *(e.json for e in ended)]),
        ]
        counts = await conn.execute(text("SELECT id, next_sequence_number FROM responses ORDER BY id"))
        assert [tuple(row) for row in counts] == [("resp_new", 3), ("resp_old", 4)]
    await engine.dispose()


async def test_logs_being_written_at_0021_go_live_and_back_to_their_creation_day(empty_database_url: str) -> None:
    """A response running across the upgrade streams on under a key of the live partition (0023),
    where the statements that store events read its log, and ends into the day it ends."""
    from alembic import command

    from app.storage import events as events_db

    config = _alembic_config(empty_database_url)
    await _in_thread(command.upgrade, config, "0020")
    engine = create_async_engine(empty_database_url)
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0}
    insert = text(
        "INSERT INTO responses (id, account_id, model, status, background, stream, settings, context_branches, "
        "context_depths) VALUES (:id, 'acct_1', 'm', 'in_progress', true, true, '{}', "
        "ARRAY[nextval('branch_ids')], ARRAY[0])"
    )
    where = text(
        "SELECT DISTINCT e.tableoid::regclass::text FROM event_log e JOIN responses r ON r.log_key = e.log_key "
        "WHERE r.id = :id"
    )
    today = log_partitions.partition_name(int(time.time() // 86400))

    async def everything(conn: Any, response_id: str) -> list[str]:
        return [e.json for e in await events_db.events_after(conn, response_id, -1, None)]

    # Its first event as the code of 0020 stored it: whole, under its key of the day it was created.
    first = orjson.dumps({**delta, "delta": "a", "logprobs": [], "sequence_number": 0}).decode()
    stored_whole = text(
        "INSERT INTO event_log (log_key, sequence_number, type, payload, committed_at) "
        "SELECT log_key, 0, 'response.output_text.delta', :payload, now() FROM responses WHERE id = :id"
    )
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        await conn.execute(insert, {"id": "resp_before"})
        await conn.execute(stored_whole, {"payload": first, "id": "resp_before"})
        assert [*(await conn.scalars(where, {"id": "resp_before"}))] == [today]
    await _in_thread(command.upgrade, config, "head")
    async with engine.begin() as conn:
        assert await everything(conn, "resp_before") == [first]  # running on, in the live partition
        assert [*(await conn.scalars(where, {"id": "resp_before"}))] == ["event_log_live"]
        streamed = await events_db.append(conn, "resp_before", [{**delta, "delta": "b", "logprobs": []}])
        assert [e.sequence_number for e in streamed] == [1]  # numbered after what it held
        closing: list[dict[str, Any]] = [{**delta, "delta": "c", "logprobs": []}, {"type": "response.completed"}]
        ended = await events_db.end(conn, "resp_before", closing, responses_db.Outcome("completed", [], time.time()))
        before = [first, *(e.json for e in [*streamed, *ended])]
        assert [*(await conn.scalars(where, {"id": "resp_before"}))] == [today]
        assert await everything(conn, "resp_before") == before
        left = text("SELECT count(*) FROM event_templates t JOIN responses r ON r.log_key = t.log_key WHERE r.id = :id")
        assert await conn.scalar(left, {"id": "resp_before"}) == 1  # its template, under its key of today
        await conn.execute(insert, {"id": "resp_after"})
        response = {"id": "resp_after", "status": "in_progress", "tools": []}
        opening = [{"type": kind, "response": response} for kind in ("response.created", "response.in_progress")]
        after = await events_db.append(conn, "resp_after", [*opening, {**delta, "delta": "c", "logprobs": []}])
        stored_once = text("SELECT count(*) FROM event_log WHERE output_path = '{response}'")
        assert await conn.scalar(stored_once) == 1  # in_progress, by reference to created
        assert [*(await conn.scalars(where, {"id": "resp_after"}))] == ["event_log_live"]
    await _in_thread(command.downgrade, config, "0020")
    async with engine.begin() as conn:
        for response_id, events in (("resp_before", before), ("resp_after", [e.json for e in after])):
            assert await _viewed(conn, response_id) == events  # (as the code of 0020 reads them)
        assert [*(await conn.scalars(where, {"id": "resp_after"}))] == [today]  # created today
        names = await conn.scalars(text("SELECT relname FROM pg_class WHERE relname = 'event_log_live'"))
        assert [*names] == []
        assert await conn.scalar(stored_once) == 0  # stored whole again
    await engine.dispose()

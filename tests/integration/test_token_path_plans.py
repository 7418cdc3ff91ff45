"""The token path's statements, as a held connection plans them (app/storage/engine.py): one plan
for any arrays, made at the connection's first run whatever the tables hold then (a test
database holds few rows, as a new deployment does), reads each response by its key. A sequential
scan, or a read of a partial index of active responses (every entry a response queued or running
has had since the last vacuum), would cost each run more as responses are stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.housekeeping import log_partitions
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.driver import DriverStatement
from app.storage.engine import create_engine
from tests.conftest import Environment

STATEMENTS = {
    "the streaming commit": events_db._APPEND_STREAMING,
    "the commit that ends responses": events_db._APPEND,
    "a claim": responses_db._CLAIM,
    "a carried response's claim": responses_db._CLAIM_CARRIED,
    "an insert": responses_db._INSERT_WITH_INPUT,
}


DAYS_NO_TEST_WRITES = range(10_000, 10_090)  # (1997): 90 days' partitions, as retention keeps them


@pytest.fixture
async def held_engine(environment: Environment) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(environment.settings(), pool_size=1, max_overflow=0, generic_plans=True)
    yield engine
    await engine.dispose()


def _indexes_reading(plan: dict[str, Any], relation: str) -> list[str | None]:
    """The index each node of a JSON plan that reads `relation` reads it by (None: none)."""

    def index_names(node: dict[str, Any]) -> set[str]:
        names = {node["Index Name"]} if "Index Name" in node else set()
        return names.union(*(index_names(child) for child in node.get("Plans", [])))

    found: list[str | None] = []
    if plan.get("Relation Name") == relation and plan.get("Node Type") != "ModifyTable":
        found += sorted(index_names(plan)) or [None]
    for child in plan.get("Plans", []):
        found += _indexes_reading(child, relation)
    return found


async def held_plan(
    engine: AsyncEngine, statement: DriverStatement, days: range = range(0), logs_each: int = 0
) -> dict[str, Any]:
    """The statement's one plan as a held connection makes it (EXPLAIN's JSON, its top with "Plan"),
    with the event log's partitions of `days` made for it in the same transaction, undone after;
    with `logs_each`, each holds that many logs of 10 events, and their statistics."""
    nulls = ", ".join(["NULL"] * len(set(statement._names)))
    async with engine.begin() as conn:
        for day in days:
            await log_partitions.create(conn, day)
        if logs_each:
            await conn.execute(
                text("""
                    INSERT INTO event_log (log_key, sequence_number, type, payload)
                    SELECT (day << 32) | log, n, 'response.in_progress', '{}'
                    FROM generate_series(CAST(:first AS bigint), :last) day, generate_series(1, :logs) log,
                         generate_series(0, 9) n
                """),
                {"first": days[0], "last": days[-1], "logs": logs_each},
            )
            await conn.exec_driver_sql("ANALYZE event_log")
        await conn.exec_driver_sql(f"PREPARE held_plan AS {statement._sql}")
        try:
            [[plan]] = (await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) EXECUTE held_plan({nulls})")).all()
        finally:
            await conn.exec_driver_sql("DEALLOCATE held_plan")
        await conn.rollback()  # (the partitions with it)
    explained: dict[str, Any] = (orjson.loads(plan) if isinstance(plan, str) else plan)[0]
    return explained


@pytest.mark.parametrize("name", STATEMENTS)
async def test_a_held_connections_one_plan_reads_responses_by_their_key(held_engine: AsyncEngine, name: str) -> None:
    indexes = _indexes_reading((await held_plan(held_engine, STATEMENTS[name]))["Plan"], "responses")
    assert indexes and set(indexes) == {"pk_responses"}


def log_partitions_read(plan: dict[str, Any]) -> set[str]:
    """The event log's partitions a JSON plan's nodes read (not those it only writes to)."""
    found = set()
    relation = plan.get("Relation Name", "")
    if relation.startswith("event_log") and plan.get("Node Type") != "ModifyTable":
        found.add(relation)
    return found.union(*(log_partitions_read(child) for child in plan.get("Plans", [])))


@pytest.mark.parametrize("name", ["the streaming commit", "the commit that ends responses"])
async def test_the_commits_read_a_running_responses_log_in_the_live_partition_alone(
    held_engine: AsyncEngine, name: str
) -> None:
    """However many days' partitions retention keeps, a commit's one plan opens none of them."""
    plan = await held_plan(held_engine, STATEMENTS[name], DAYS_NO_TEST_WRITES[:1])
    assert log_partitions_read(plan["Plan"]) == {"event_log_live"}


async def jit_above_cost(engine: AsyncEngine) -> float:
    """The cost estimate past which Postgres compiles a statement (JIT), where JIT is on."""
    async with engine.connect() as conn:
        return float(await conn.scalar(text("SHOW jit_above_cost")))


@pytest.mark.parametrize("statement", [events_db._EVENTS_AFTER, events_db._LOGS_AFTER], ids=["one log", "many logs"])
async def test_a_log_reads_plan_holds_no_partition_however_many_days_retention_keeps(
    held_engine: AsyncEngine, statement: Any
) -> None:
    """A read of a log by the key in its response's row has its rows read by `event_log_after`,
    whose own query leaves out every partition but the key's (migration 0024): the read's plan
    and its estimate are those of a fresh database with the partitions of 90 days. Through
    `event_log`, it had a scan of each partition set up at each run, and an estimate that grew
    with them, past `jit_above_cost` (where JIT is on, a compiled read: 0.6 s)."""
    read = statement if isinstance(statement, DriverStatement) else DriverStatement(statement)
    fresh = await held_plan(held_engine, read)
    explained = await held_plan(held_engine, read, DAYS_NO_TEST_WRITES, logs_each=100)
    assert log_partitions_read(explained["Plan"]) == set()
    assert explained["Plan"]["Total Cost"] == fresh["Plan"]["Total Cost"] < await jit_above_cost(held_engine)


async def test_the_operators_view_of_a_log_is_estimated_below_compiling_with_the_partitions_of_90_days(
    held_engine: AsyncEngine,
) -> None:
    """`response_events` is read in psql, whose sessions compile where the server's JIT is on: it
    reads a log through `event_log_after` (migration 0024), and no longer looks up the event
    before an opening event in a subquery of each row, estimated at 800,000 with these partitions."""
    view = text("SELECT payload FROM response_events WHERE response_id = :response_id ORDER BY sequence_number")
    explained = await held_plan(held_engine, DriverStatement(view), DAYS_NO_TEST_WRITES, logs_each=100)
    assert 0 < explained["Plan"]["Total Cost"] < await jit_above_cost(held_engine)

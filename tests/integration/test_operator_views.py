"""The views an operator reads from psql (docs/operating.md) say what they promise, on seeded data."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.service.state import AppState


@pytest.fixture
async def model(state: AppState) -> AsyncIterator[str]:
    """A model name of the test's own; its seeded rows go afterwards (running ones would be reaped by
    another test's reaper, and these rows are no real responses)."""
    name = f"views-{secrets.token_hex(3)}"
    yield name
    async with state.engine.begin() as conn:
        await conn.execute(text("DELETE FROM responses WHERE model = :model"), {"model": name})


async def seed(
    state: AppState, account_id: str, model: str, rows: list[dict[str, Any]], at: datetime | None = None
) -> None:
    """Rows whose ages count back from `at` (now unless given); leases count from now."""
    async with state.engine.begin() as conn:
        for row in rows:
            await conn.execute(
                text("""
                INSERT INTO responses (id, account_id, model, status, background, stream, settings, context_branches,
                                       context_depths, created_at, started_at, completed_at, lease_expires_at,
                                       usage, error)
                VALUES (:id, :account, :model, :status, true, false, '{}', ARRAY[nextval('branch_ids')], ARRAY[0],
                        CAST(:at AS timestamptz) - CAST(:age AS interval),
                        CAST(:at AS timestamptz) - CAST(:running AS interval),
                        CAST(:at AS timestamptz) - CAST(:ended AS interval), now() + CAST(:lease AS interval),
                        CAST(:usage AS jsonb), CAST(:error AS jsonb))
                """),
                {
                    "id": f"resp_view_{secrets.token_hex(6)}",
                    "account": account_id,
                    "model": model,
                    "status": row["status"],
                    "at": at or datetime.now(UTC),
                    "age": row.get("age", timedelta(0)),
                    "running": row.get("running", timedelta(0)),
                    "ended": row.get("ended", timedelta(0)),
                    "lease": row.get("lease", timedelta(0)),
                    "usage": json.dumps(row["usage"]) if "usage" in row else None,
                    "error": json.dumps(row["error"]) if "error" in row else None,
                },
            )


async def view(state: AppState, name: str, model: str) -> list[dict[str, Any]]:
    async with state.engine.connect() as conn:
        rows = await conn.execute(text(f"SELECT * FROM {name} WHERE model = :model"), {"model": model})
        return [dict(row._mapping) for row in rows]


async def test_queue_health_counts_what_waits_and_runs_and_the_leases_about_to_lapse(
    state: AppState, account_id: str, model: str
) -> None:
    await seed(
        state,
        account_id,
        model,
        [
            {"status": "queued", "age": timedelta(minutes=2)},
            {"status": "queued", "age": timedelta(seconds=5)},
            {"status": "in_progress", "running": timedelta(minutes=3), "lease": timedelta(seconds=8)},
            {"status": "in_progress", "running": timedelta(seconds=30), "lease": timedelta(seconds=25)},
            {"status": "completed"},
        ],
    )
    [health] = await view(state, "queue_health", model)
    assert (health["queued"], health["in_progress"], health["leases_expiring_in_10s"]) == (2, 2, 1)
    assert timedelta(minutes=2) <= health["oldest_queued_for"] < timedelta(minutes=3)
    assert timedelta(minutes=3) <= health["longest_running_for"] < timedelta(minutes=4)


async def test_usage_adds_up_each_accounts_tokens_per_day(state: AppState, account_id: str, model: str) -> None:
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 120,
    }
    await seed(
        state,
        account_id,
        model,
        [
            {"status": "completed", "usage": usage},
            {"status": "completed", "usage": usage},
            {"status": "failed", "error": {"code": "server_error", "message": "x"}},
            {"status": "completed", "usage": usage, "age": timedelta(days=2)},
        ],
    )
    days = sorted(await view(state, "usage_by_account_day", model), key=lambda row: row["day"])
    assert [(d["responses"], d["failed"], d["input_tokens"], d["output_tokens"]) for d in days] == [
        (1, 0, 100, 20),
        (3, 1, 200, 40),
    ]
    assert (days[1]["cached_tokens"], days[1]["reasoning_tokens"]) == (80, 10)
    assert days[1]["day"] - days[0]["day"] == timedelta(days=2)


async def test_failures_are_grouped_by_code_with_the_latest_message(
    state: AppState, account_id: str, model: str
) -> None:
    await seed(
        state,
        account_id,
        model,
        [
            {"status": "failed", "error": {"code": "server_error", "message": "older"}, "ended": timedelta(minutes=5)},
            {"status": "failed", "error": {"code": "server_error", "message": "newest"}, "ended": timedelta(0)},
            {"status": "failed", "error": {"code": "context_length_exceeded", "message": "too long"}},
            {"status": "completed"},
        ],
        # The view groups by UTC day: minutes after midnight, "five minutes ago" is yesterday.
        at=datetime.now(UTC).replace(hour=12, minute=0),
    )
    failures = {row["code"]: row for row in await view(state, "failures_by_code", model)}
    assert {code: row["failures"] for code, row in failures.items()} == {
        "server_error": 2,
        "context_length_exceeded": 1,
    }
    assert failures["server_error"]["last_message"] == "newest"


async def test_conversation_overview_counts_each_conversations_items_and_names_its_running_response(
    state: AppState, account_id: str
) -> None:
    from app.storage import conversations as conversations_db
    from app.storage.items import with_new_ids
    from tests.integration.conftest import accept

    said = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    async with state.engine.begin() as conn:
        items = with_new_ids([said] * 3)
        conversation = await conversations_db.create(conn, account_id, {"k": "v"}, items)
    response_id = await accept(state, account_id, input="in it", conversation=conversation.id)
    async with state.engine.connect() as conn:
        row = (
            await conn.execute(text("SELECT * FROM conversation_overview WHERE id = :id"), {"id": conversation.id})
        ).one()
    assert (row.items, row.active_response_id, row.metadata) == (3, response_id, {"k": "v"})
    assert row.account.startswith("integration-") and row.last_response_at is not None

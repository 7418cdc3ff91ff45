"""operator views

Revision ID: 0010
Revises: 0009

Views an operator reads from psql (docs/operating.md): the queue's health per model, usage per
account per day, and failures by error code, with a partial index that keeps the last cheap.
Create Date: 2026-12-01 11:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

VIEWS = {
    "queue_health": (
        "Per model: responses waiting and running now, how long the oldest has waited or run, and leases "
        "about to expire (a worker that stopped renewing). Reads only active responses.",
        """
        SELECT model,
               count(*) FILTER (WHERE status = 'queued') AS queued,
               max(now() - created_at) FILTER (WHERE status = 'queued') AS oldest_queued_for,
               count(*) FILTER (WHERE status = 'in_progress') AS in_progress,
               max(now() - started_at) FILTER (WHERE status = 'in_progress') AS longest_running_for,
               count(*) FILTER (WHERE status = 'in_progress' AND lease_expires_at < now() + interval '10 seconds')
                   AS leases_expiring_in_10s,
               count(*) FILTER (WHERE status = 'in_progress' AND cancel_requested_at IS NOT NULL) AS stopping
        FROM responses WHERE status IN ('queued', 'in_progress')
        GROUP BY model
        """,
    ),
    "usage_by_account_day": (
        "Per account, model and day (UTC) of creation: responses, and the tokens of those that ended. "
        "Counts the responses Postgres keeps: not store=false foreground ones, nor those retention removed.",
        """
        SELECT a.name AS account, r.model, date_trunc('day', r.created_at AT TIME ZONE 'UTC')::date AS day,
               count(*) AS responses,
               count(*) FILTER (WHERE r.status = 'failed') AS failed,
               coalesce(sum((r.usage ->> 'input_tokens')::bigint), 0) AS input_tokens,
               coalesce(sum((r.usage -> 'input_tokens_details' ->> 'cached_tokens')::bigint), 0) AS cached_tokens,
               coalesce(sum((r.usage ->> 'output_tokens')::bigint), 0) AS output_tokens,
               coalesce(sum((r.usage -> 'output_tokens_details' ->> 'reasoning_tokens')::bigint), 0)
                   AS reasoning_tokens
        FROM responses r JOIN accounts a ON a.id = r.account_id
        GROUP BY a.name, r.model, 3
        """,
    ),
    "failures_by_code": (
        "Failed responses per day (UTC), model and error code, with the latest message and response.",
        """
        SELECT date_trunc('day', completed_at AT TIME ZONE 'UTC')::date AS day, model,
               coalesce(error ->> 'code', '(none)') AS code, count(*) AS failures,
               max(completed_at) AS last_at,
               (array_agg(error ->> 'message' ORDER BY completed_at DESC))[1] AS last_message,
               (array_agg(id ORDER BY completed_at DESC))[1] AS last_response_id
        FROM responses WHERE status = 'failed'
        GROUP BY 1, model, 3
        """,
    ),
}


def upgrade() -> None:
    op.create_index("ix_responses_failed", "responses", ["completed_at"], postgresql_where=sa.text("status = 'failed'"))
    for name, (comment, query) in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {query}")
        op.execute(f"COMMENT ON VIEW {name} IS '{comment}'")


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {name}")
    op.drop_index("ix_responses_failed", table_name="responses")

"""responses: continuations

Revision ID: 0012
Revises: 0011

A generation whose worker stopped or died is continued by another worker from its last committed
event (design invariant 4): `continuations` counts how many times, up to
RESPONSES_MAX_CONTINUATIONS. A response waiting for its continuation is `in_progress` with no
worker and no lease; `queue_health` counts those (`awaiting_continuation`).
Create Date: 2026-12-01 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_QUEUE_HEALTH = """
    SELECT model,
           count(*) FILTER (WHERE status = 'queued') AS queued,
           max(now() - created_at) FILTER (WHERE status = 'queued') AS oldest_queued_for,
           count(*) FILTER (WHERE status = 'in_progress') AS in_progress,
           max(now() - started_at) FILTER (WHERE status = 'in_progress') AS longest_running_for,
           count(*) FILTER (WHERE status = 'in_progress' AND lease_expires_at < now() + interval '10 seconds')
               AS leases_expiring_in_10s,
           count(*) FILTER (WHERE status = 'in_progress' AND cancel_requested_at IS NOT NULL) AS stopping{extra}
    FROM responses WHERE status IN ('queued', 'in_progress')
    GROUP BY model
"""
_COMMENT = (
    "Per model: responses waiting and running now, how long the oldest has waited or run, leases "
    "about to expire (a worker that stopped renewing){extra}. Reads only active responses."
)
_AWAITING = (
    ",\n           count(*) FILTER (WHERE status = 'in_progress' AND worker_id IS NULL) AS awaiting_continuation"
)


def upgrade() -> None:
    op.add_column(
        "responses",
        sa.Column(
            "continuations",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="times its generation was continued by another worker after its own stopped or died",
        ),
    )
    op.execute(f"CREATE OR REPLACE VIEW queue_health AS {_QUEUE_HEALTH.format(extra=_AWAITING)}")
    comment = _COMMENT.format(extra=", and running responses waiting for a worker to continue them")
    op.execute(f"COMMENT ON VIEW queue_health IS '{comment}'")


def downgrade() -> None:
    op.execute("DROP VIEW queue_health")
    op.execute(f"CREATE VIEW queue_health AS {_QUEUE_HEALTH.format(extra='')}")
    op.execute(f"COMMENT ON VIEW queue_health IS '{_COMMENT.format(extra='')}'")
    op.drop_column("responses", "continuations")

"""steering input

Revision ID: 0016
Revises: 0015

`response_steers` holds the input a WebSocket client steered a running response with
(`response.steer`), written before the steer is acknowledged: the worker running the response (or
the one that continues it after a crash) finds it here, and it names the response that took it as
input (`successor_id`) once that response is created.
Create Date: 2026-12-04 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "response_steers",
        sa.Column("id", sa.Text(), primary_key=True, comment="steer_… id"),
        sa.Column(
            "response_id",
            sa.Text(),
            sa.ForeignKey("responses.id", ondelete="CASCADE"),
            nullable=False,
            comment="the running response it steers",
        ),
        sa.Column("input", postgresql.JSONB(), nullable=False, comment="its input: user messages, as items"),
        sa.Column(
            "successor_id",
            sa.Text(),
            comment="the response created with this input (null while it waits for one)",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the row was created",
        ),
        comment="WebSocket steering: input queued for a running response's successor, stored before it is acknowledged.",
    )
    op.create_index("ix_response_steers_response", "response_steers", ["response_id"])


def downgrade() -> None:
    op.drop_table("response_steers")

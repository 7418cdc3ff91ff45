"""retention bookkeeping

Revision ID: 0002
Revises: 0001

Retention removes event logs (and expired responses) periodically; it needs to know which
logs are gone, and to find finished responses by age quickly.
Create Date: 2026-11-29 18:28:17.726093
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "responses",
        sa.Column(
            "events_purged_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when retention removed its event log",
        ),
    )
    op.create_index(
        "ix_responses_log_retention",
        "responses",
        ["completed_at"],
        unique=False,
        postgresql_where=sa.text("events_purged_at IS NULL AND completed_at IS NOT NULL"),
    )
    op.create_table_comment(
        "responses",
        "One row per stored (or background) response. Its items and events hang off it.",
        existing_comment="One row per stored response. Its items and events hang off it.",
        schema=None,
    )


def downgrade() -> None:
    op.create_table_comment(
        "responses",
        "One row per stored response. Its items and events hang off it.",
        existing_comment="One row per stored (or background) response. Its items and events hang off it.",
        schema=None,
    )
    op.drop_index(
        "ix_responses_log_retention",
        table_name="responses",
        postgresql_where=sa.text("events_purged_at IS NULL AND completed_at IS NOT NULL"),
    )
    op.drop_column("responses", "events_purged_at")

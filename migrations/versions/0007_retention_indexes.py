"""retention indexes

Revision ID: 0007
Revises: 0006

Retention found what expired by a sequential scan of every response and a sort (seconds per
batch at a million rows). Each kind of expiry now has a partial index in the order its rows
come due (app/housekeeping/retention.py): stored responses by creation, background store=false ones and
event logs by completion. The event-log index of 0002 is split in two, background and
foreground, whose windows differ: one index for both had the foreground pass step over every
background log still in its window.
Create Date: 2026-12-01 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_responses_stored_expiry": ("created_at", "store"),
    "ix_responses_unstored_expiry": ("completed_at", "NOT store"),
    "ix_responses_stream_log_expiry": ("completed_at", "events_purged_at IS NULL AND background"),
    "ix_responses_foreground_log_expiry": ("completed_at", "events_purged_at IS NULL AND NOT background"),
}


def upgrade() -> None:
    op.drop_index("ix_responses_log_retention", table_name="responses")
    for name, (column, where) in _INDEXES.items():
        op.create_index(name, "responses", [column], postgresql_where=sa.text(where))


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="responses")
    op.create_index(
        "ix_responses_log_retention",
        "responses",
        ["completed_at"],
        postgresql_where=sa.text("events_purged_at IS NULL AND completed_at IS NOT NULL"),
    )

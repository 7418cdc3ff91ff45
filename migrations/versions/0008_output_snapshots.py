"""output snapshots

Revision ID: 0008
Revises: 0007

A poll of a running response folded its whole event log into the output so far (half a second
at 12,000 events). A poll now saves what it folded, and the next one folds only the events
after it (app/storage/events.py, output_so_far).
Create Date: 2026-12-01 11:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "output_snapshots",
        sa.Column("response_id", sa.Text(), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False, comment="the last event folded into output"),
        sa.Column("output", postgresql.JSON(), nullable=False, comment="the response's output items after that event"),
        sa.ForeignKeyConstraint(
            ["response_id"],
            ["responses.id"],
            name=op.f("fk_output_snapshots_response_id_responses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("response_id", name=op.f("pk_output_snapshots")),
        comment="The output so far of a running response, saved by a poll so that the next one folds only "
        "the events after it. Removed with the event log.",
    )


def downgrade() -> None:
    op.drop_table("output_snapshots")

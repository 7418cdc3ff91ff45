"""room for in-place updates of responses

Revision ID: 0003
Revises: 0002

Every event commit bumps `responses.next_sequence_number` of each streaming response. With
full pages, each bump wrote a new row version elsewhere and an entry in every index; with room
left on the page, Postgres updates the row in place (a HOT update) without touching indexes.
Create Date: 2026-11-29 21:45:00
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE responses SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE responses RESET (fillfactor)")

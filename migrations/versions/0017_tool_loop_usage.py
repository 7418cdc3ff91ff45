"""a tool loop's usage so far

Revision ID: 0017
Revises: 0016

`responses.rounds_usage`: the token usage of a running tool loop's finished rounds (each an
inference whose MCP calls the server then makes), saved once each round's first call is committed
as begun. A worker that continues the loop after its first one stopped counts on it, so the
response's usage sums every round, the dead worker's too.
Create Date: 2026-12-04 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "responses",
        sa.Column(
            "rounds_usage",
            postgresql.JSONB(),
            comment="a running tool loop's finished rounds' usage: what a worker continuing it counts on",
        ),
    )


def downgrade() -> None:
    op.drop_column("responses", "rounds_usage")

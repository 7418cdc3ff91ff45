"""accounts: disabled, and their limits

Revision ID: 0011
Revises: 0010

`responses-server accounts disable NAME` refuses every key of the account at once, keeping its
keys and responses (`accounts enable` lets them in again). `responses-server limits set` gives
an account requests and tokens per minute and a cap on its responses queued or running at once
(app/service/admission.py, counted through a partial index); the authentication statement reads them with
the key.
Create Date: 2026-12-01 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "accounts",
        sa.Column(
            "disabled_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="set by `accounts disable`: its keys are refused",
        ),
    )

    op.add_column(
        "accounts",
        sa.Column(
            "requests_per_minute",
            sa.Integer(),
            nullable=True,
            comment="creates admitted per minute (`limits set`); null: no limit",
        ),
    )
    op.add_column(
        "accounts",
        sa.Column(
            "tokens_per_minute",
            sa.Integer(),
            nullable=True,
            comment="tokens admitted per minute, estimated then settled; null: no limit",
        ),
    )

    op.add_column(
        "accounts",
        sa.Column(
            "max_concurrent",
            sa.Integer(),
            nullable=True,
            comment="stored or background responses queued or running at once; null: no limit",
        ),
    )
    op.create_index(
        "ix_responses_active_by_account",
        "responses",
        ["account_id"],
        postgresql_where=sa.text("status IN ('queued', 'in_progress')"),
    )


def downgrade() -> None:
    op.drop_index("ix_responses_active_by_account", table_name="responses")
    op.drop_column("accounts", "max_concurrent")
    op.drop_column("accounts", "tokens_per_minute")
    op.drop_column("accounts", "requests_per_minute")
    op.drop_column("accounts", "disabled_at")

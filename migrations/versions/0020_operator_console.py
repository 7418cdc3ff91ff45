"""operator console

Revision ID: 0020
Revises: 0019

The operator's console (app/console/): operators' keys (`operator_keys`, made by `responses-server
operators create`, never an account's), their browser sessions (`console_sessions`, by the hash
of the session cookie, with the session's CSRF token), when each whole event of the log was
committed (`event_log.committed_at`: a response's timeline; deltas, folded into runs, carry none)
and when its last continuation was claimed (`responses.continued_at`),
and the indexes that list responses newest first: every account's, a model's, a rare status's,
those with a metadata pair.
Create Date: 2026-12-05 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: no partition is rewritten.
    op.add_column(
        "event_log",
        sa.Column(
            "committed_at",
            sa.DateTime(timezone=True),
            comment="when a whole event was committed (a response's timeline); null for deltas and runs",
        ),
    )
    op.add_column(
        "responses",
        sa.Column(
            "continued_at",
            sa.DateTime(timezone=True),
            comment="its last continuation claimed by another worker",
        ),
    )
    op.create_table(
        "operator_keys",
        sa.Column("id", sa.Text(), primary_key=True, comment="opk_… id"),
        sa.Column("name", sa.Text(), nullable=False, comment="who holds it, as the operator named it"),
        sa.Column(
            "key_hash", sa.Text(), nullable=False, unique=True, comment="hex SHA-256 of the key; never the key itself"
        ),
        sa.Column("display_prefix", sa.Text(), nullable=False, comment="first characters of the key"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
            comment="when the row was created",
        ),
        sa.Column("last_used_at", sa.DateTime(timezone=True), comment="its last console login"),
        sa.Column(
            "revoked_at", sa.DateTime(timezone=True), comment="set by `operators revoke`: refused, sessions ended"
        ),
        comment="Keys of the console's operators: they see every account's responses. Stored as hashes.",
    )
    op.create_index(
        "ix_operator_keys_live_name",
        "operator_keys",
        ["name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.Text(), primary_key=True, comment="hex SHA-256 of the session cookie"),
        sa.Column(
            "operator_key_id",
            sa.Text(),
            sa.ForeignKey("operator_keys.id", ondelete="CASCADE"),
            nullable=False,
            comment="the key it logged in with",
        ),
        sa.Column("csrf_token", sa.Text(), nullable=False, comment="what every form of the session must carry"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
            comment="when the row was created",
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        comment="The console's browser sessions; a logout or an expiry ends one.",
    )
    op.create_index("ix_console_sessions_operator", "console_sessions", ["operator_key_id"])
    # The console's lists, newest first, a million rows in: every account's, one model's, one rare
    # status's (the active ones have ix_responses_active), and those with a metadata pair.
    op.create_index("ix_responses_recent", "responses", ["created_at", "id"])
    op.create_index("ix_responses_model_recent", "responses", ["model", "created_at", "id"])
    op.create_index(
        "ix_responses_rare_status",
        "responses",
        ["status", "created_at", "id"],
        postgresql_where=sa.text("status IN ('failed', 'cancelled', 'incomplete')"),
    )
    op.create_index(
        "ix_responses_metadata",
        "responses",
        ["metadata"],
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
        postgresql_where=sa.text("metadata <> '{}'::jsonb"),
    )


def downgrade() -> None:
    for index in (
        "ix_responses_metadata",
        "ix_responses_rare_status",
        "ix_responses_model_recent",
        "ix_responses_recent",
    ):
        op.drop_index(index, table_name="responses")
    op.drop_table("console_sessions")
    op.drop_table("operator_keys")
    op.drop_column("event_log", "committed_at")
    op.drop_column("responses", "continued_at")

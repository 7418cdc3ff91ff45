"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 17:38:36.536832
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Frozen here: the view as this revision creates it (later revisions replace it, not edit this).
RESPONSE_OVERVIEW_SQL = """
CREATE VIEW response_overview AS
SELECT r.id, a.name AS account, r.model, r.status, r.background, r.stream,
       r.previous_response_id, r.created_at, r.completed_at,
       r.completed_at - r.created_at AS duration,
       (r.usage ->> 'input_tokens')::int AS input_tokens,
       (r.usage ->> 'output_tokens')::int AS output_tokens,
       r.next_sequence_number AS events, r.error ->> 'message' AS error
FROM responses r JOIN accounts a ON a.id = r.account_id
"""

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.Text(), nullable=False, comment="acct_… id"),
        sa.Column("name", sa.Text(), nullable=False, comment="operator-chosen account name"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accounts")),
        sa.UniqueConstraint("name", name=op.f("uq_accounts_name")),
        comment="Tenants. Every response belongs to one; accounts never see each other's data.",
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Text(), nullable=False, comment="key_… id"),
        sa.Column("account_id", sa.Text(), nullable=False),
        sa.Column(
            "key_hash", sa.Text(), nullable=False, comment="hex SHA-256 of the key; the key itself is never stored"
        ),
        sa.Column(
            "display_prefix", sa.Text(), nullable=False, comment="first characters of the key, to tell keys apart"
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True, comment="updated at most once a minute"),
        sa.Column(
            "revoked_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="set by `keys revoke`; a revoked key is refused",
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_api_keys_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        comment="Bearer keys of accounts, stored as hashes.",
    )
    op.create_index(op.f("ix_api_keys_account_id"), "api_keys", ["account_id"], unique=False)
    op.create_table(
        "responses",
        sa.Column("id", sa.Text(), nullable=False, comment="resp_… id"),
        sa.Column("account_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False, comment="catalog id of the model"),
        sa.Column(
            "status",
            sa.Text(),
            server_default="queued",
            nullable=False,
            comment="queued → in_progress → completed|incomplete|failed|cancelled; terminal never changes",
        ),
        sa.Column("background", sa.Boolean(), nullable=False, comment="created with background=true"),
        sa.Column("stream", sa.Boolean(), nullable=False, comment="created with stream=true"),
        sa.Column(
            "store",
            sa.Boolean(),
            server_default=sa.text("true"),
            nullable=False,
            comment="created with store (default true)",
        ),
        sa.Column(
            "instructions",
            sa.Text(),
            nullable=True,
            comment="system instructions of this turn (not inherited by the chain)",
        ),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
            comment="client metadata",
        ),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="echoed request settings (temperature, top_p, text, …)",
        ),
        sa.Column(
            "previous_response_id",
            sa.Text(),
            nullable=True,
            comment="as the client sent it; may name a since-deleted response",
        ),
        sa.Column(
            "context_parent_id",
            sa.Text(),
            nullable=True,
            comment="the nearest live ancestor: the link walked to rebuild context (skips deleted turns)",
        ),
        sa.Column(
            "chain_depth",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="turns before this one in its chain",
        ),
        sa.Column(
            "usage",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment="token usage, set when the response ends",
        ),
        sa.Column(
            "error",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment="{code, message} of a failed response",
        ),
        sa.Column(
            "incomplete_details",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment="{reason} of an incomplete response",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True, comment="claimed by a worker"),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True, comment="reached a terminal status"),
        sa.Column(
            "cancel_requested_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="a cancel (or client disconnect) asked it to stop",
        ),
        sa.Column("worker_id", sa.Text(), nullable=True, comment="the worker that claimed it"),
        sa.Column(
            "lease_expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="the claiming worker's heartbeat deadline",
        ),
        sa.Column(
            "next_sequence_number",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="sequence number the next event of this response gets",
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled')",
            name=op.f("ck_responses_status"),
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_responses_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["context_parent_id"],
            ["responses.id"],
            name=op.f("fk_responses_context_parent_id_responses"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
        comment="One row per stored response. Its items and events hang off it.",
    )
    op.create_index(op.f("ix_responses_account_id_created_at"), "responses", ["account_id", "created_at"], unique=False)
    op.create_index(
        "ix_responses_active",
        "responses",
        ["status", "lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('queued', 'in_progress')"),
    )
    op.create_index(op.f("ix_responses_context_parent_id"), "responses", ["context_parent_id"], unique=False)
    op.create_table(
        "items",
        sa.Column("id", sa.Text(), nullable=False, comment="msg_…/fc_…/rs_… id, assigned by the server"),
        sa.Column("response_id", sa.Text(), nullable=False),
        sa.Column("side", sa.Text(), nullable=False, comment="input: sent by the client; output: generated"),
        sa.Column("position", sa.Integer(), nullable=False, comment="order within the response's side"),
        sa.Column("type", sa.Text(), nullable=False, comment="message, function_call, …"),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="the item as the API shows it, without its id",
        ),
        sa.CheckConstraint("side IN ('input', 'output')", name=op.f("ck_items_side")),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name=op.f("fk_items_response_id_responses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_items")),
        sa.UniqueConstraint("response_id", "side", "position", name=op.f("uq_items_response_id_side_position")),
        comment="Every input and output item, stored once under the response that introduced it.",
    )
    op.create_table(
        "response_events",
        sa.Column("response_id", sa.Text(), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False, comment="0, 1, 2, … per response, no gaps"),
        sa.Column("type", sa.Text(), nullable=False, comment="SSE event type, e.g. response.output_text.delta"),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="the event as sent, sequence_number included",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name=op.f("fk_response_events_response_id_responses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("response_id", "sequence_number", name=op.f("pk_response_events")),
        comment="The durable, replayable stream of each response: what SSE followers read.",
    )
    op.execute(RESPONSE_OVERVIEW_SQL)
    op.execute("COMMENT ON VIEW response_overview IS 'One line per response, for operators.'")


def downgrade() -> None:
    op.execute("DROP VIEW response_overview")
    op.drop_table("response_events")
    op.drop_table("items")
    op.drop_index(op.f("ix_responses_context_parent_id"), table_name="responses")
    op.drop_index(
        "ix_responses_active", table_name="responses", postgresql_where=sa.text("status IN ('queued', 'in_progress')")
    )
    op.drop_index(op.f("ix_responses_account_id_created_at"), table_name="responses")
    op.drop_table("responses")
    op.drop_index(op.f("ix_api_keys_account_id"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("accounts")

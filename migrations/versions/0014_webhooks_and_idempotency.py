"""webhooks and idempotency keys

Revision ID: 0014
Revises: 0013

Webhooks (design invariant 8): an account's endpoints (`webhook_endpoints`), and the outbox
(`webhook_deliveries`): when a background response ends, one delivery per endpoint subscribed to
its event is written in the statement that ends it; any API process or worker takes due
deliveries (SKIP LOCKED) and sends them, signed as Standard Webhooks signs them, until one is
accepted or 72 hours have passed. Idempotency keys (`idempotency_keys`, invariant 4): a create
sent again with the same `Idempotency-Key` answers with what the first created.
Create Date: 2026-12-01 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

PENDING = "delivered_at IS NULL AND failed_at IS NULL"


def _created_at() -> sa.Column[object]:
    return sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.text("now()"),
        comment="when the row was created",
    )


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Text(), primary_key=True, comment="we_… id"),
        sa.Column(
            "account_id",
            sa.Text(),
            sa.ForeignKey("accounts.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
            comment="whose responses it hears of",
        ),
        sa.Column("url", sa.Text(), nullable=False, comment="where deliveries are POSTed (through the egress guard)"),
        sa.Column(
            "events",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            comment="the event types it is sent: response.completed, …",
        ),
        sa.Column("secret", sa.Text(), nullable=False, comment="whsec_…: signs its deliveries (Standard Webhooks)"),
        sa.Column(
            "previous_secret",
            sa.Text(),
            comment="the secret before the last rotation: deliveries carry a signature by each for a day after it",
        ),
        sa.Column("rotated_at", sa.DateTime(timezone=True), comment="when the secret was last rotated"),
        _created_at(),
        comment="Where an account's webhooks go: `responses-server webhooks add|list|remove|rotate`.",
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column(
            "id", sa.Text(), primary_key=True, comment="evt_…: the event's id and its webhook-id on every attempt"
        ),
        sa.Column(
            "endpoint_id",
            sa.Text(),
            sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column(
            "response_id",
            sa.Text(),
            nullable=False,
            comment="the response whose end it tells (no foreign key: deleting it does not take back what it announced)",
        ),
        sa.Column("type", sa.Text(), nullable=False, comment="response.completed, response.failed, …"),
        sa.Column("payload", sa.Text(), nullable=False, comment="the body, as signed and sent on every attempt"),
        _created_at(),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0", comment="attempts begun"),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when it is due; while an attempt runs, when that attempt counts as lost",
        ),
        sa.Column("delivered_at", sa.DateTime(timezone=True), comment="when its endpoint answered 2xx"),
        sa.Column("failed_at", sa.DateTime(timezone=True), comment="when it was given up (72 hours of attempts)"),
        sa.Column("last_status", sa.Integer(), comment="the HTTP status of its last attempt, if one came"),
        sa.Column("last_error", sa.Text(), comment="why its last attempt failed"),
        sa.CheckConstraint("delivered_at IS NULL OR failed_at IS NULL", name="ended_once"),
        comment="The webhook outbox: one row per event and endpoint, written with the response's end.",
    )
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["next_attempt_at"], postgresql_where=sa.text(PENDING)
    )
    op.create_index(
        "ix_webhook_deliveries_pending_since", "webhook_deliveries", ["created_at"], postgresql_where=sa.text(PENDING)
    )
    op.create_index(
        "ix_webhook_deliveries_done_expiry",
        "webhook_deliveries",
        ["created_at"],
        postgresql_where=sa.text(f"NOT ({PENDING})"),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("account_id", sa.Text(), sa.ForeignKey("accounts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", sa.Text(), nullable=False, comment="the client's Idempotency-Key"),
        sa.Column("fingerprint", sa.Text(), nullable=False, comment="SHA-256 of the request: its route and body"),
        sa.Column(
            "resource_id",
            sa.Text(),
            comment="what the first request created (a response, a conversation); null while it is being created",
        ),
        sa.Column("item_ids", postgresql.ARRAY(sa.Text()), comment="the items it created, for an items create"),
        _created_at(),
        sa.PrimaryKeyConstraint("account_id", "key"),
        comment="Idempotency-Key: a create sent again within 24 hours answers with what the first created.",
    )
    op.create_index("ix_idempotency_keys_expiry", "idempotency_keys", ["created_at"])
    op.execute(f"CREATE VIEW webhook_health AS {_HEALTH}")
    op.execute(
        "COMMENT ON VIEW webhook_health IS 'Per webhook endpoint: deliveries pending, failing (pending after a "
        "failed attempt), delivered in the last day, given up, the oldest pending and the last error.'"
    )


_HEALTH = f"""
    SELECT e.id, a.name AS account, e.url, e.events,
           count(d.id) FILTER (WHERE d.{PENDING.replace(" AND ", " AND d.")}) AS pending,
           count(d.id) FILTER (WHERE d.delivered_at IS NULL AND d.failed_at IS NULL AND d.attempts > 0
                                 AND d.last_error IS NOT NULL) AS failing,
           count(d.id) FILTER (WHERE d.delivered_at > now() - interval '1 day') AS delivered_last_day,
           count(d.id) FILTER (WHERE d.failed_at IS NOT NULL) AS given_up,
           now() - min(d.created_at) FILTER (WHERE d.{PENDING.replace(" AND ", " AND d.")}) AS oldest_pending_for,
           (SELECT last_error FROM webhook_deliveries l WHERE l.endpoint_id = e.id AND l.last_error IS NOT NULL
            ORDER BY l.next_attempt_at DESC LIMIT 1) AS last_error
    FROM webhook_endpoints e JOIN accounts a ON a.id = e.account_id
    LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
    GROUP BY e.id, a.name
"""


def downgrade() -> None:
    op.execute("DROP VIEW webhook_health")
    op.drop_table("idempotency_keys")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")

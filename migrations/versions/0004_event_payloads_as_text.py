"""event payloads as text

Revision ID: 0004
Revises: 0003

Every event is encoded once, by the worker, and followers replay it as text. Stored as jsonb,
Postgres parsed each event's JSON on insert and rebuilt it to splice in its sequence number,
about a third of an event commit's cost, for a document nothing ever queries inside.
Create Date: 2026-11-30 02:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COMMENT = "the event as sent, sequence_number included: the worker's JSON text, never parsed here"


def upgrade() -> None:
    op.alter_column(
        "response_events",
        "payload",
        type_=sa.Text(),
        existing_type=postgresql.JSONB(),
        existing_nullable=False,
        postgresql_using="payload::text",
        comment=_COMMENT,
        existing_comment="the event as sent, sequence_number included",
    )


def downgrade() -> None:
    op.alter_column(
        "response_events",
        "payload",
        type_=postgresql.JSONB(),
        existing_type=sa.Text(),
        existing_nullable=False,
        postgresql_using="payload::jsonb",
        comment="the event as sent, sequence_number included",
        existing_comment=_COMMENT,
    )

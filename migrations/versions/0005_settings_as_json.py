"""response settings as json

Revision ID: 0005
Revises: 0004

A response's settings hold the JSON Schemas a client sent (text.format.schema, the tools'
parameters). jsonb sorts an object's keys, so a schema went to the model server with its
properties re-ordered, and guided decoding writes keys in the schema's order: `json` keeps the
text as sent. Settings stored before this revision were already re-ordered by jsonb; they keep
that order.
Create Date: 2026-12-01 03:15:00
"""

from __future__ import annotations

from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COMMENT = "echoed request settings (temperature, text, tools, …): json, so schemas keep their key order"


def upgrade() -> None:
    op.alter_column(
        "responses",
        "settings",
        type_=postgresql.JSON(),
        existing_type=postgresql.JSONB(),
        existing_nullable=False,
        postgresql_using="settings::json",
        comment=_COMMENT,
        existing_comment="echoed request settings (temperature, top_p, text, …)",
    )


def downgrade() -> None:
    op.alter_column(
        "responses",
        "settings",
        type_=postgresql.JSONB(),
        existing_type=postgresql.JSON(),
        existing_nullable=False,
        postgresql_using="settings::jsonb",
        comment="echoed request settings (temperature, top_p, text, …)",
        existing_comment=_COMMENT,
    )

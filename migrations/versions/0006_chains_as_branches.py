"""chains stored as branches

Revision ID: 0006
Revises: 0005

A response's context was rebuilt by walking `context_parent_id` to the chain's start: a query
whose cost grew with the chain's history (a 10,000-turn chain: a second per turn, input_items
pages quadratic). Chains are now stored as branches (docs/architecture.md, "Chains"): each
response lists the branches its context runs through, and every item carries its response's
branch and depth, so a context is one range of an index per branch.

Existing chains are placed as new ones would have been: a chain's first turn starts a branch,
the first continuation of a response (by creation time) continues its branch, any other starts
one. `context_parent_id` already skips deleted turns, which is what a branch needs.

Item payloads become `json`: a context is read back as the text written, not re-serialised
from jsonb (most of the time of reading a long context), and keeps the client's key order.
Create Date: 2026-12-01 08:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_PARENT_COMMENT = "the response this one continues, while it exists: its key refuses a continuation of a deleted one"
_PAYLOAD_COMMENT = "the item as the API shows it, without its id: json, read back as the text it was written"
_OLD_PAYLOAD_COMMENT = "the item as the API shows it, without its id"
_OLD_PARENT_COMMENT = "the nearest live ancestor: the link walked to rebuild context (skips deleted turns)"

# One level of every chain per step, each found through the index on context_parent_id: a hash
# join here would scan the whole table once per level of the deepest chain.
_PLACE_RESPONSES = """
WITH RECURSIVE placed AS (
    SELECT id, ARRAY[nextval('branch_ids')] AS branches, ARRAY[chain_depth] AS depths
    FROM responses WHERE context_parent_id IS NULL
    UNION ALL
    SELECT c.id,
           CASE WHEN f.first THEN p.branches ELSE p.branches || nextval('branch_ids') END,
           CASE WHEN f.first THEN p.depths[1:cardinality(p.depths) - 1] ELSE p.depths END || c.chain_depth
    FROM placed p JOIN responses c ON c.context_parent_id = p.id
    CROSS JOIN LATERAL (
        SELECT NOT EXISTS (SELECT 1 FROM responses s WHERE s.context_parent_id = p.id
                           AND (s.created_at, s.id) < (c.created_at, c.id)) AS first
    ) f
)
UPDATE responses r
SET context_branches = placed.branches, context_depths = placed.depths,
    branch_continued = EXISTS (SELECT 1 FROM responses c WHERE c.context_parent_id = r.id)
FROM placed WHERE r.id = placed.id
"""

_PLACE_ITEMS = """
UPDATE items i SET branch_id = r.context_branches[cardinality(r.context_branches)], depth = r.chain_depth
FROM responses r WHERE r.id = i.response_id
"""


def upgrade() -> None:
    op.execute("CREATE SEQUENCE branch_ids")
    op.add_column(
        "responses",
        sa.Column(
            "context_branches",
            postgresql.ARRAY(sa.BigInteger()),
            comment="the branches this response's context runs through, oldest first; the last is its own",
        ),
    )
    op.add_column(
        "responses",
        sa.Column(
            "context_depths",
            postgresql.ARRAY(sa.Integer()),
            comment="for each of context_branches, the deepest turn of it in this context",
        ),
    )
    op.add_column(
        "responses",
        sa.Column(
            "branch_continued",
            sa.Boolean(),
            nullable=False,
            server_default=sa.text("false"),
            comment="a response continued this one on its branch; any other continuation starts a new branch",
        ),
    )
    op.add_column(
        "items",
        sa.Column("branch_id", sa.BigInteger(), comment="its response's branch (the last of context_branches)"),
    )
    op.add_column("items", sa.Column("depth", sa.Integer(), comment="its response's chain_depth"))
    op.execute("SET LOCAL enable_hashjoin = off")
    op.execute("SET LOCAL enable_mergejoin = off")
    op.execute(_PLACE_RESPONSES)
    op.execute("RESET enable_hashjoin")
    op.execute("RESET enable_mergejoin")
    op.execute(_PLACE_ITEMS)
    for table, column in (("responses", "context_branches"), ("responses", "context_depths")):
        op.alter_column(table, column, nullable=False)
    for column in ("branch_id", "depth"):
        op.alter_column("items", column, nullable=False)
    op.alter_column(
        "items",
        "payload",
        type_=postgresql.JSON(),
        existing_type=postgresql.JSONB(),
        existing_nullable=False,
        postgresql_using="payload::json",
        comment=_PAYLOAD_COMMENT,
        existing_comment=_OLD_PAYLOAD_COMMENT,
    )
    op.create_index(
        "ix_items_branch_id_depth_side_position", "items", ["branch_id", "depth", "side", "position"], unique=False
    )
    op.alter_column("responses", "context_parent_id", comment=_PARENT_COMMENT, existing_comment=_OLD_PARENT_COMMENT)


def downgrade() -> None:
    op.alter_column("responses", "context_parent_id", comment=_OLD_PARENT_COMMENT, existing_comment=_PARENT_COMMENT)
    op.drop_index("ix_items_branch_id_depth_side_position", table_name="items")
    op.alter_column(
        "items",
        "payload",
        type_=postgresql.JSONB(),
        existing_type=postgresql.JSON(),
        existing_nullable=False,
        postgresql_using="payload::jsonb",
        comment=_OLD_PAYLOAD_COMMENT,
        existing_comment=_PAYLOAD_COMMENT,
    )
    op.drop_column("items", "depth")
    op.drop_column("items", "branch_id")
    op.drop_column("responses", "branch_continued")
    op.drop_column("responses", "context_depths")
    op.drop_column("responses", "context_branches")
    op.execute("DROP SEQUENCE branch_ids")

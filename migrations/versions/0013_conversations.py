"""conversations

Revision ID: 0013
Revises: 0012

OpenAI's Conversations API. A conversation lists items in order (`conversation_items`): the items
its responses hold (by reference: the rows in `items`, never copies) and the items created in it
directly (stored there, since no response holds them). A response created with `conversation`
sees its items, then its own input; when it ends completed or incomplete its input and output
join the conversation. One response at a time runs on a conversation (`active_response_id`). A
response in a conversation is kept as long as the conversation (retention skips it).
Create Date: 2026-12-01 18:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.Text(), primary_key=True, comment="conv_… id"),
        sa.Column(
            "account_id",
            sa.Text(),
            sa.ForeignKey("accounts.id", ondelete="CASCADE"),
            nullable=False,
            comment="the account it belongs to: no other sees it",
        ),
        sa.Column(
            "metadata", postgresql.JSONB(), nullable=False, server_default="{}", comment="the client's, 16 pairs"
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the row was created",
        ),
        sa.Column(
            "active_response_id",
            sa.Text(),
            sa.ForeignKey("responses.id", ondelete="SET NULL"),
            comment="the response running on it, if any: another is refused (conversation_locked) until it ends",
        ),
        sa.Column(
            "items_removed",
            sa.BigInteger(),
            nullable=False,
            server_default="0",
            comment="counts removals of its items: a worker's copy of them is whole but for later items while unchanged",
        ),
        comment="OpenAI's conversations: an ordered list of items that responses read and add to.",
    )
    op.create_index(None, "conversations", ["account_id", "created_at"])
    op.execute("CREATE SEQUENCE conversation_item_batches")
    op.execute("COMMENT ON SEQUENCE conversation_item_batches IS 'orders the batches of items joining conversations'")
    op.create_table(
        "conversation_items",
        sa.Column(
            "conversation_id",
            sa.Text(),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "batch", sa.BigInteger(), nullable=False, comment="the batch it joined in (a response's end, a create)"
        ),
        sa.Column("place", sa.Integer(), nullable=False, comment="its place in that batch"),
        sa.Column("item_id", sa.Text(), nullable=False, comment="the item's id, as the API shows it"),
        sa.Column(
            "item_ref",
            sa.Text(),
            sa.ForeignKey("items.id", ondelete="CASCADE"),
            comment="the row in items that holds it, for an item a response holds",
        ),
        sa.Column("type", sa.Text(), comment="message, function_call, …: for an item created in the conversation"),
        sa.Column("payload", sa.JSON(), comment="the item without its id: for an item created in the conversation"),
        sa.PrimaryKeyConstraint("conversation_id", "batch", "place"),
        sa.UniqueConstraint("conversation_id", "item_id"),
        sa.CheckConstraint("(item_ref IS NULL) = (payload IS NOT NULL)", name="held_once"),
        comment="The items of each conversation in order: references to items its responses hold, or items of its own.",
    )
    op.create_index(None, "conversation_items", ["item_ref"])
    op.add_column(
        "responses",
        sa.Column(
            "conversation_id",
            sa.Text(),
            sa.ForeignKey("conversations.id", ondelete="SET NULL"),
            comment="the conversation it was created in: it reads its items and adds its own when it ends",
        ),
    )
    # Deleting a conversation or a response finds what refers to it through these.
    op.create_index(None, "responses", ["conversation_id"], postgresql_where=sa.text("conversation_id IS NOT NULL"))
    op.create_index(
        None, "conversations", ["active_response_id"], postgresql_where=sa.text("active_response_id IS NOT NULL")
    )
    op.drop_index("ix_responses_stored_expiry", table_name="responses")
    op.create_index(
        "ix_responses_stored_expiry",
        "responses",
        ["created_at"],
        postgresql_where=sa.text("store AND conversation_id IS NULL"),
    )
    op.execute(f"CREATE VIEW conversation_overview AS {_OVERVIEW}")
    op.execute(
        "COMMENT ON VIEW conversation_overview IS 'Per conversation: its account, items, the response running "
        "on it, and its last response.'"
    )


_OVERVIEW = """
    SELECT c.id, a.name AS account, c.created_at, c.metadata,
           (SELECT count(*) FROM conversation_items ci WHERE ci.conversation_id = c.id) AS items,
           c.active_response_id,
           (SELECT max(r.created_at) FROM responses r WHERE r.conversation_id = c.id) AS last_response_at
    FROM conversations c JOIN accounts a ON a.id = c.account_id
"""


def downgrade() -> None:
    op.execute("DROP VIEW conversation_overview")
    op.drop_index("ix_responses_stored_expiry", table_name="responses")
    op.create_index("ix_responses_stored_expiry", "responses", ["created_at"], postgresql_where=sa.text("store"))
    op.drop_column("responses", "conversation_id")
    op.drop_table("conversation_items")
    op.execute("DROP SEQUENCE conversation_item_batches")
    op.drop_table("conversations")

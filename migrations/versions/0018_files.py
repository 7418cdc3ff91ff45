"""files

Revision ID: 0018
Revises: 0017

The Files API: `files` (one row per uploaded file: its account, name, purpose, size, digest and
expiry) and `file_pieces` (its bytes in pieces of 1 MiB, so that a file is streamed in and out
without being held whole, and Postgres stays the only stateful tier). A piece's key to its file
is checked at commit: an upload writes its pieces as they arrive and its row last, in one
transaction, so that an upload cut short leaves nothing. Pieces are stored uncompressed
(`STORAGE EXTERNAL`): most documents are compressed already.
Create Date: 2026-12-05 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.Text(), primary_key=True, comment="file-… id"),
        sa.Column(
            "account_id",
            sa.Text(),
            sa.ForeignKey("accounts.id", ondelete="CASCADE"),
            nullable=False,
            comment="the account it belongs to: no other sees it",
        ),
        sa.Column("filename", sa.Text(), nullable=False, comment="as uploaded"),
        sa.Column("purpose", sa.Text(), nullable=False, comment="as uploaded: assistants, user_data, batch, …"),
        sa.Column("bytes", sa.BigInteger(), nullable=False, comment="its size"),
        sa.Column("sha256", sa.Text(), nullable=False, comment="hex SHA-256 of its bytes"),
        sa.Column("content_type", sa.Text(), comment="the media type its upload declared, if any"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the row was created",
        ),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            comment="when retention removes it (expires_after); null: never",
        ),
        sa.CheckConstraint("purpose IN (" + ", ".join(f"'{p}'" for p in PURPOSES) + ")", name="purpose"),
        comment="Files API: uploaded files; their bytes are in file_pieces.",
    )
    op.create_index("ix_files_account_id_created_at_id", "files", ["account_id", "created_at", "id"])
    op.create_index("ix_files_expiry", "files", ["expires_at"], postgresql_where=sa.text("expires_at IS NOT NULL"))
    op.create_table(
        "file_pieces",
        sa.Column(
            "file_id",
            sa.Text(),
            sa.ForeignKey("files.id", ondelete="CASCADE", deferrable=True, initially="DEFERRED"),
            nullable=False,
            comment="the file (written before its row, in the upload's transaction: the key is checked at commit)",
        ),
        sa.Column("seq", sa.Integer(), nullable=False, comment="its place in the file, from 0"),
        sa.Column(
            "data", sa.LargeBinary(), nullable=False, comment="up to 1 MiB of the file's bytes (stored uncompressed)"
        ),
        sa.PrimaryKeyConstraint("file_id", "seq"),
        comment="The bytes of each file, in pieces of 1 MiB, streamed in and out.",
    )
    op.execute("ALTER TABLE file_pieces ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("file_pieces")
    op.drop_table("files")

"""vector stores

Revision ID: 0019
Revises: 0018

Vector stores (`vector_stores`), the files attached to them and their ingestion
(`vector_store_files`), file batches, and every store's chunks in one table (`chunks`: text, a
full-text vector, and the embedding as `real[]`, so that the schema is the same with or without
pgvector). Where the server has pgvector, its extension is created here; the vector index of each
embedding length (HNSW over `embedding::vector(N)`, partial on `dimensions = N`) is made when a
process first meets that length (app/storage/vector_index.py): no DDL per store.
Create Date: 2026-12-05 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    connection = op.get_bind()
    if connection.scalar(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")):
        try:
            with connection.begin_nested():  # (a role that may not create it: vector stores say so at start)
                op.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except sa.exc.DBAPIError:
            pass
    op.create_table(
        "vector_stores",
        sa.Column("id", sa.Text(), nullable=False, comment="vs_… id"),
        sa.Column("account_id", sa.Text(), nullable=False, comment="the account it belongs to: no other sees it"),
        sa.Column("name", sa.Text(), nullable=True, comment="the client's"),
        sa.Column("description", sa.Text(), nullable=True, comment="the client's"),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
            comment="the client's, 16 pairs",
        ),
        sa.Column(
            "embedding_model",
            sa.Text(),
            nullable=False,
            comment="the catalog embedding model its chunks are embedded by",
        ),
        sa.Column("embedding_dimensions", sa.Integer(), nullable=False, comment="the length of that model's vectors"),
        sa.Column(
            "chunking",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="its files' default chunking: {max_chunk_size_tokens, chunk_overlap_tokens}",
        ),
        sa.Column(
            "expires_after_days",
            sa.Integer(),
            nullable=True,
            comment="expires_after: days after it was last active; null: never",
        ),
        sa.Column(
            "last_active_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="its last create, change or search",
        ),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="last_active_at + expires_after_days, kept with it",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_vector_stores_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_stores")),
        comment="Vector stores: files chunked and embedded for search; their chunks are in chunks.",
    )
    op.create_index(
        op.f("ix_vector_stores_account_id_created_at_id"),
        "vector_stores",
        ["account_id", "created_at", "id"],
        unique=False,
    )
    op.create_index(
        "ix_vector_stores_expiry",
        "vector_stores",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "vector_store_file_batches",
        sa.Column("id", sa.Text(), nullable=False, comment="vsfb_… id"),
        sa.Column("vector_store_id", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.Column(
            "cancelled_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when it was cancelled: its files not yet ingested were cancelled",
        ),
        sa.ForeignKeyConstraint(
            ["vector_store_id"],
            ["vector_stores.id"],
            name=op.f("fk_vector_store_file_batches_vector_store_id_vector_stores"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vector_store_file_batches")),
        comment="File batches: files attached to a vector store together; their status is their files'.",
    )
    op.create_index(
        op.f("ix_vector_store_file_batches_vector_store_id"),
        "vector_store_file_batches",
        ["vector_store_id"],
        unique=False,
    )
    op.create_table(
        "vector_store_files",
        sa.Column("vector_store_id", sa.Text(), nullable=False),
        sa.Column(
            "file_id", sa.Text(), nullable=False, comment="the file (deleting it detaches it from every vector store)"
        ),
        sa.Column(
            "status",
            sa.Text(),
            server_default=sa.text("'in_progress'"),
            nullable=False,
            comment="in_progress, completed, cancelled, failed",
        ),
        sa.Column(
            "last_error",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment="why it failed: {code: server_error|unsupported_file|invalid_file, message}",
        ),
        sa.Column(
            "attributes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
            comment="the client's, for filters",
        ),
        sa.Column(
            "chunking",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            comment="{max_chunk_size_tokens, chunk_overlap_tokens}",
        ),
        sa.Column(
            "usage_bytes",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="the bytes of its chunks' text",
        ),
        sa.Column("batch_id", sa.Text(), nullable=True, comment="the file batch it was attached in, if any"),
        sa.Column(
            "lease_until",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="while a worker ingests it: when its claim lapses",
        ),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False, comment="ingestions begun"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="when the row was created",
        ),
        sa.CheckConstraint(
            "status IN ('in_progress', 'completed', 'cancelled', 'failed')", name=op.f("ck_vector_store_files_status")
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["vector_store_file_batches.id"],
            name=op.f("fk_vector_store_files_batch_id_vector_store_file_batches"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["file_id"], ["files.id"], name=op.f("fk_vector_store_files_file_id_files"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["vector_store_id"],
            ["vector_stores.id"],
            name=op.f("fk_vector_store_files_vector_store_id_vector_stores"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("vector_store_id", "file_id", name=op.f("pk_vector_store_files")),
        comment="The files attached to each vector store and their ingestion.",
    )
    op.create_index(op.f("ix_vector_store_files_batch_id"), "vector_store_files", ["batch_id"], unique=False)
    op.create_index(op.f("ix_vector_store_files_file_id"), "vector_store_files", ["file_id"], unique=False)
    op.create_index(
        "ix_vector_store_files_ingesting",
        "vector_store_files",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("status = 'in_progress'"),
    )
    op.create_index(
        op.f("ix_vector_store_files_vector_store_id_created_at_file_id"),
        "vector_store_files",
        ["vector_store_id", "created_at", "file_id"],
        unique=False,
    )
    op.create_table(
        "chunks",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("vector_store_id", sa.Text(), nullable=False),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, comment="its place in its file, from 0"),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False, comment="its length, as the chunker counts tokens"),
        sa.Column(
            "dimensions", sa.Integer(), nullable=False, comment="its embedding's length: which vector index holds it"
        ),
        sa.Column(
            "embedding",
            postgresql.ARRAY(sa.REAL()),
            nullable=False,
            comment="its vector (cast to pgvector's vector by the search)",
        ),
        sa.Column(
            "search",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english', text)", persisted=True),
            nullable=True,
            comment="its words for full-text search",
        ),
        sa.ForeignKeyConstraint(
            ["vector_store_id", "file_id"],
            ["vector_store_files.vector_store_id", "vector_store_files.file_id"],
            name=op.f("fk_chunks_vector_store_id_vector_store_files"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
        sa.UniqueConstraint("vector_store_id", "file_id", "seq", name=op.f("uq_chunks_vector_store_id_file_id_seq")),
        comment="Every vector store's chunks, in one table; a vector index per embedding length is made where pgvector is.",
    )
    op.create_index("ix_chunks_search", "chunks", ["search"], unique=False, postgresql_using="gin")


def downgrade() -> None:
    op.drop_table("chunks")
    op.drop_table("vector_store_files")
    op.drop_table("vector_store_file_batches")
    op.drop_table("vector_stores")

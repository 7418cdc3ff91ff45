"""pgvector: whether this Postgres has it, and the vector index of each embedding length.

Chunks keep their embeddings as `real[]`, so that the schema is the same on a Postgres without
pgvector (where vector stores say they are unavailable and everything else works). Where it is,
each embedding length N that the catalog's models give has one HNSW index over
`embedding::vector(N)` (cosine distance), partial on `dimensions = N`: one index per length, made
once, whatever the number of stores.
"""

from __future__ import annotations

import logging

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)


async def pgvector_version(engine: AsyncEngine) -> str | None:
    """The version of the `vector` extension in this database; None if it is not there."""
    async with engine.connect() as conn:
        version = await conn.scalar(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
    return None if version is None else str(version)


def index_name(dimensions: int) -> str:
    return f"ix_chunks_embedding_{int(dimensions)}"


# HNSW's `m` and `ef_construction`: pgvector's defaults (16, 64) find 0.79 of the exact top 10 at
# a million chunks, these 0.99, for an index built in about three times as long
# (docs/benchmark.md, "Documents").
GRAPH = (32, 128)


def index_statement(dimensions: int, *, concurrently: bool = True, graph: tuple[int, int] | None = GRAPH) -> str:
    """The DDL of the vector index of this embedding length; `graph`: HNSW's `m` and
    `ef_construction` (pgvector's defaults, 16 and 64, when None)."""
    dims = int(dimensions)
    how = "CONCURRENTLY " if concurrently else ""
    options = "" if graph is None else f" WITH (m = {int(graph[0])}, ef_construction = {int(graph[1])})"
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {index_name(dims)} ON chunks "
        f"USING hnsw ((CAST(embedding AS vector({dims}))) vector_cosine_ops){options} WHERE dimensions = {dims}"
    )


async def ensure_index(engine: AsyncEngine, dimensions: int) -> None:
    """Makes the vector index of this embedding length, if it is not there yet. Made without
    locking out writes (CONCURRENTLY): on a table with chunks already, it takes a while."""
    dims = int(dimensions)
    async with engine.connect() as conn:
        exists = await conn.scalar(text("SELECT to_regclass(:name)"), {"name": index_name(dims)})
    if exists is not None:
        return
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        log.info("making the vector index of %d-dimension embeddings (%s)", dims, index_name(dims))
        await conn.execute(text(index_statement(dims)))

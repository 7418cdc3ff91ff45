"""Chunks: a vector store file's text in pieces, each with its embedding and its words, in one
table for every store; and the search over them.

A search runs two ranked reads of the stores' chunks (of files `completed`, whose attributes
pass the filter): the nearest by cosine distance (pgvector's HNSW index of the embedding's
length, scanned on past the filter: `hnsw.iterative_scan`), and the best by full-text rank
(`ts_rank_cd`) among the chunks holding any of the query's words (stemmed, stop words left out:
a question's words are rarely all in the passage that answers it). They are fused by weighted reciprocal rank, and each
score divided by the highest a chunk could have (first in both lists), so that every score is in
[0, 1] before any threshold: the same scale whatever the query.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.search_filters import Comparison, Compound, Filter
from app.storage.tables import chunks

RRF_K = 60  # reciprocal rank fusion's constant: a chunk's part of a list's weight is 1 / (RRF_K + rank)
# How the vector index is scanned: on past the filter until enough rows pass it (pgvector 0.8's
# iterative scans), with a candidate list of 400: at 100,000 chunks it finds 0.98 of the exact
# top 10 where 100 finds 0.93 and pgvector's default, 40, 0.82, for a millisecond or two
# (docs/benchmark.md, "Documents").
HNSW_SETTINGS = ("SET LOCAL hnsw.iterative_scan = relaxed_order", "SET LOCAL hnsw.ef_search = 400")


@dataclass(frozen=True, slots=True)
class NewChunk:
    seq: int
    text: str
    tokens: int
    embedding: list[float]


async def add(conn: AsyncConnection, store_id: str, file_id: str, new: Sequence[NewChunk]) -> None:
    if not new:
        return
    await conn.execute(
        insert(chunks),
        [
            {
                "vector_store_id": store_id,
                "file_id": file_id,
                "seq": c.seq,
                "text": c.text,
                "tokens": c.tokens,
                "dimensions": len(c.embedding),
                "embedding": c.embedding,
            }
            for c in new
        ],
    )


async def stored_count(conn: AsyncConnection, store_id: str, file_id: str) -> int:
    """Chunks of the file stored so far (an ingestion continued goes on after them)."""
    count = await conn.scalar(
        text("SELECT count(*) FROM chunks WHERE vector_store_id = :store AND file_id = :file"),
        {"store": store_id, "file": file_id},
    )
    return int(count or 0)


async def file_text(conn: AsyncConnection, store_id: str, file_id: str) -> list[str]:
    rows = await conn.execute(
        text("SELECT text FROM chunks WHERE vector_store_id = :store AND file_id = :file ORDER BY seq"),
        {"store": store_id, "file": file_id},
    )
    return [row.text for row in rows]


@dataclass(frozen=True, slots=True)
class Found:
    chunk_id: int
    vector_store_id: str
    file_id: str
    filename: str
    text: str
    score: float
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Query:
    vector: list[float] | None  # None: keyword search alone
    text: str
    embedding_weight: float = 1.0
    text_weight: float = 1.0


async def search(
    conn: AsyncConnection,
    store_ids: Sequence[str],
    queries: Sequence[Query],
    *,
    limit: int,
    filters: Filter | None,
    score_threshold: float,
) -> list[Found]:
    """The best `limit` chunks of these stores for the queries together (each chunk once, with
    its best score over the queries), best first."""
    where, parameters = _filter_sql(filters, itertools.count())
    parameters["stores"] = list(store_ids)
    best: dict[int, float] = {}
    for query in queries:
        lists: list[tuple[float, list[int]]] = []
        if query.vector is not None and query.embedding_weight > 0:
            lists.append((query.embedding_weight, await _nearest(conn, query.vector, where, parameters, limit)))
        if query.text.strip() and query.text_weight > 0:
            lists.append((query.text_weight, await _keyword(conn, query.text, where, parameters, limit)))
        highest = sum(weight for weight, _ in lists) / (RRF_K + 1)
        fused: dict[int, float] = {}
        for weight, ranked in lists:
            for rank, chunk_id in enumerate(ranked, 1):
                fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (RRF_K + rank)
        for chunk_id, score in fused.items():
            best[chunk_id] = max(best.get(chunk_id, 0.0), min(score / highest, 1.0))
    chosen = sorted((item for item in best.items() if item[1] >= score_threshold), key=lambda item: -item[1])[:limit]
    return await _found(conn, chosen)


async def _nearest(
    conn: AsyncConnection, vector: list[float], where: str, parameters: dict[str, Any], limit: int
) -> list[int]:
    dims = len(vector)  # an integer of ours: the partial index's predicate must be a literal to be used
    for setting in HNSW_SETTINGS:
        await conn.execute(text(setting))
    rows = await conn.execute(
        text(f"""
            SELECT c.id FROM chunks c
            JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id AND f.file_id = c.file_id
            WHERE c.dimensions = {dims} AND c.vector_store_id = ANY(:stores) AND f.status = 'completed' AND {where}
            ORDER BY CAST(c.embedding AS vector({dims})) <=> CAST(:vector AS vector({dims}))
            LIMIT :limit
        """),
        {**parameters, "vector": _vector_text(vector), "limit": limit},
    )
    return [row.id for row in rows]


async def _keyword(conn: AsyncConnection, words: str, where: str, parameters: dict[str, Any], limit: int) -> list[int]:
    rows = await conn.execute(
        text(f"""
            SELECT c.id FROM chunks c
            JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id AND f.file_id = c.file_id,
            to_tsquery('simple', array_to_string(ARRAY(
                SELECT quote_literal(lexeme) FROM unnest(tsvector_to_array(to_tsvector('english', :words))) lexeme
            ), ' | ')) AS q
            WHERE c.search @@ q AND c.vector_store_id = ANY(:stores) AND f.status = 'completed' AND {where}
            ORDER BY ts_rank_cd(c.search, q) DESC, c.id
            LIMIT :limit
        """),
        {**parameters, "words": words, "limit": limit},
    )
    return [row.id for row in rows]


async def _found(conn: AsyncConnection, chosen: list[tuple[int, float]]) -> list[Found]:
    if not chosen:
        return []
    rows = await conn.execute(
        text("""
            SELECT c.id, c.vector_store_id, c.file_id, fl.filename, c.text, f.attributes FROM chunks c
            JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id AND f.file_id = c.file_id
            JOIN files fl ON fl.id = c.file_id
            WHERE c.id = ANY(:ids)
        """),
        {"ids": [chunk_id for chunk_id, _ in chosen]},
    )
    by_id = {row.id: row for row in rows}
    return [
        Found(chunk_id, row.vector_store_id, row.file_id, row.filename, row.text, round(score, 6), row.attributes)
        for chunk_id, score in chosen
        if (row := by_id.get(chunk_id)) is not None
    ]


def _vector_text(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _filter_sql(found: Filter | None, names: itertools.count[int]) -> tuple[str, dict[str, Any]]:
    """The filter as a condition on the file's attributes (`f.attributes`), its values bound."""
    if found is None:
        return "true", {}
    if isinstance(found, Compound):
        parts = [_filter_sql(inner, names) for inner in found.filters]
        joined = f" {found.op.upper()} ".join(f"({sql})" for sql, _ in parts)
        return joined, {k: v for _, bound in parts for k, v in bound.items()}
    return _comparison_sql(found, names)


def _comparison_sql(found: Comparison, names: itertools.count[int]) -> tuple[str, dict[str, Any]]:
    n = next(names)
    key, value = f"k{n}", f"v{n}"
    attribute = f"(f.attributes -> :{key})"
    bound: dict[str, Any] = {key: found.key}
    if found.op in ("in", "nin"):
        bound[value] = orjson.dumps(list(found.value)).decode()  # type: ignore[arg-type]
        contained = f"coalesce(CAST(:{value} AS jsonb) @> {attribute}, false)"
        return (contained if found.op == "in" else f"NOT {contained}"), bound
    bound[value] = orjson.dumps(found.value).decode()
    if found.op == "eq":
        return f"{attribute} = CAST(:{value} AS jsonb)", bound
    if found.op == "ne":
        return f"{attribute} IS DISTINCT FROM CAST(:{value} AS jsonb)", bound
    operator = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[found.op]
    if isinstance(found.value, str):
        bound[value] = found.value
        return (
            f"(CASE WHEN jsonb_typeof({attribute}) = 'string' THEN f.attributes ->> :{key} END) {operator} :{value}",
            bound,
        )
    bound[value] = float(found.value)  # type: ignore[arg-type]
    number = (
        f"(CASE WHEN jsonb_typeof({attribute}) = 'number' THEN CAST(f.attributes ->> :{key} AS double precision) END)"
    )
    return f"{number} {operator} :{value}", bound

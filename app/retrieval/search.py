"""A search of vector stores: each query embedded by each store's model, the stores' chunks
ranked by meaning and by words (app/storage/chunks.py), the best kept; the stores are active
now (their expiry moves). Raises EmbeddingFailed when a model cannot embed the queries."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from app.catalog import Catalog
from app.embeddings.embedders import Embedders
from app.protocol.search_filters import Filter
from app.storage import chunks as chunks_db
from app.storage import vector_stores as stores_db


async def search_stores(
    engine: AsyncEngine,
    embedders: Embedders,
    catalog: Catalog,
    stores: Sequence[stores_db.StoredVectorStore],
    queries: Sequence[str],
    *,
    limit: int,
    filters: Filter | None,
    score_threshold: float,
    embedding_weight: float = 1.0,
    text_weight: float = 1.0,
) -> list[chunks_db.Found]:
    hits: list[chunks_db.Found] = []
    by_model: dict[str, list[stores_db.StoredVectorStore]] = {}
    for store in stores:
        by_model.setdefault(store.embedding_model, []).append(store)
    for model_id, group in by_model.items():
        vectors = (await embedders.of(catalog.embedding_model(model_id)).embed(list(queries))).vectors
        asked = [
            chunks_db.Query(vector, query, embedding_weight, text_weight)
            for vector, query in zip(vectors, queries, strict=True)
        ]
        async with engine.begin() as conn:
            hits += await chunks_db.search(
                conn,
                [store.id for store in group],
                asked,
                limit=limit,
                filters=filters,
                score_threshold=score_threshold,
            )
            await stores_db.touch(conn, [store.id for store in group])
    return sorted(hits, key=lambda hit: -hit.score)[:limit]

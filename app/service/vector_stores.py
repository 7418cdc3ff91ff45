"""Vector stores: create (with files), retrieve, list, modify, delete, and search. A store is the
account's alone (another account's answers as an unknown one, 404); it is embedded by one catalog
embedding model, kept with it, whose length its queries must have. Vector stores need pgvector:
without it every route here answers a 400 saying so, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from app import errors
from app.embeddings.embedders import EmbeddingFailed
from app.protocol import vector_store_request
from app.protocol.ids import new_id
from app.protocol.pages import listed
from app.protocol.search_filters import Filter
from app.queue.ingestion import enqueue_ingestions
from app.queue.redis_link import REDIS_LINK
from app.retrieval import search as retrieval
from app.service.state import NO_PGVECTOR, AppState
from app.storage import chunks as chunks_db
from app.storage import files as files_db
from app.storage import vector_store_files as store_files_db
from app.storage import vector_stores as stores_db
from app.storage.vector_index import ensure_index

POLL_AFTER_MS = "500"  # openai-poll-after-ms: how soon the SDK's pollers look again


def store_not_found(store_id: str, param: str | None = None) -> errors.NotFound:
    return errors.NotFound(f"No vector store found with id '{store_id}'.", param=param)


async def require_pgvector(state: AppState) -> None:
    if await state.check_pgvector() is None:
        raise errors.InvalidRequest(f"Vector stores are unavailable: {NO_PGVECTOR}.", code="vector_stores_unavailable")


async def found(
    state: AppState, account_id: str, store_id: str, param: str | None = None
) -> stores_db.StoredVectorStore:
    await require_pgvector(state)
    async with state.engine.connect() as conn:
        store = await stores_db.get(conn, account_id, store_id)
    if store is None:
        raise store_not_found(store_id, param)
    return store


async def rendered(state: AppState, stores: Sequence[stores_db.StoredVectorStore]) -> list[dict[str, Any]]:
    async with state.engine.connect() as conn:
        counts, usage = await stores_db.counts(conn, [store.id for store in stores])
    return [store.render(counts[store.id], usage[store.id]) for store in stores]


async def create(state: AppState, account_id: str, body: dict[str, Any]) -> dict[str, Any]:
    await require_pgvector(state)
    new = vector_store_request.parse_create(body)
    model = state.catalog.embedding_model(new.embedding_model, "embedding_model")
    if new.embedding_dimension is not None and new.embedding_dimension != model.dimensions:
        raise errors.InvalidRequest(
            f"Invalid 'embedding_dimension': the embedding model '{model.id}' makes vectors of "
            f"{model.dimensions} dimensions, not {new.embedding_dimension}.",
            param="embedding_dimension",
            code="invalid_value",
        )
    await ensure_index(state.engine, model.dimensions)
    async with state.engine.begin() as conn:
        await check_files(conn, account_id, new.file_ids, "file_ids")
        store = await stores_db.create(
            conn,
            account_id,
            new_id("vs"),
            name=new.name,
            description=new.description,
            metadata=new.metadata,
            embedding_model=model.id,
            embedding_dimensions=model.dimensions,
            chunking=new.chunking,
            expires_after_days=new.expires_after_days,
        )
        attached = await store_files_db.attach(
            conn, store.id, [store_files_db.Attachment(f, {}, new.chunking) for f in new.file_ids]
        )
    await enqueue(state, store, attached)
    return (await rendered(state, [store]))[0]


async def check_files(conn: Any, account_id: str, file_ids: Sequence[str], param: str, *, indexed: bool = True) -> None:
    """A 404 naming the first of these files the account does not have (`param[i]`, or `param`)."""
    for index, file_id in enumerate(file_ids):
        if await files_db.get(conn, account_id, file_id) is None:
            where = f"{param}[{index}]" if indexed else param
            raise errors.NotFound(f"No such File object: {file_id}", param=where)


async def enqueue(
    state: AppState, store: stores_db.StoredVectorStore, attached: Sequence[store_files_db.StoredStoreFile]
) -> None:
    """Hands the files still to be ingested to the workers that embed with the store's model.
    Should Redis not take them now, the workers' housekeeping finds them in Postgres and enqueues
    them itself."""
    waiting = [(f.vector_store_id, f.file_id, 0) for f in attached if f.status == "in_progress"]
    queue_name = state.catalog.embedding_queue_for(store.embedding_model, state.settings.queue_name)
    with REDIS_LINK.tolerated("enqueue ingestions"):
        await enqueue_ingestions(state.redis, queue_name, waiting)


async def retrieve(state: AppState, account_id: str, store_id: str) -> dict[str, Any]:
    return (await rendered(state, [await found(state, account_id, store_id)]))[0]


async def list_stores(
    state: AppState,
    account_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
    before: str | None,
) -> dict[str, Any]:
    await require_pgvector(state)
    async with state.engine.connect() as conn:
        cursors = {}
        for name, store_id in (("after", after), ("before", before)):
            cursors[name] = None if store_id is None else await stores_db.get(conn, account_id, store_id)
            if store_id is not None and cursors[name] is None:
                raise errors.InvalidRequest(
                    f"Invalid '{name}': no vector store with id '{store_id}'.", param=name, code="invalid_value"
                )
        page = await stores_db.page(
            conn, account_id, order=order, limit=limit, after=cursors["after"], before=cursors["before"]
        )
    return listed(await rendered(state, page.data), page.has_more)


async def modify(state: AppState, account_id: str, store_id: str, body: dict[str, Any]) -> dict[str, Any]:
    await require_pgvector(state)
    changes = vector_store_request.parse_modify(body)
    async with state.engine.begin() as conn:
        store = await stores_db.update_store(conn, account_id, store_id, changes)
    if store is None:
        raise store_not_found(store_id)
    return (await rendered(state, [store]))[0]


async def delete(state: AppState, account_id: str, store_id: str) -> dict[str, Any]:
    await require_pgvector(state)
    async with state.engine.begin() as conn:
        if not await stores_db.remove(conn, account_id, store_id):
            raise store_not_found(store_id)
    return {"id": store_id, "object": "vector_store.deleted", "deleted": True}


async def search(state: AppState, account_id: str, store_id: str, body: dict[str, Any]) -> dict[str, Any]:
    store = await found(state, account_id, store_id)
    asked = vector_store_request.parse_search(body)
    hits = await search_stores(
        state,
        [store],
        asked.queries,
        limit=asked.max_num_results,
        filters=asked.filters,
        score_threshold=asked.score_threshold,
        semantic_only=asked.ranker == "none",
    )
    return {
        "object": "vector_store.search_results.page",
        "search_query": asked.queries,
        "data": [
            {
                "file_id": hit.file_id,
                "filename": hit.filename,
                "score": hit.score,
                "attributes": hit.attributes,
                "content": [{"type": "text", "text": hit.text}],
            }
            for hit in hits
        ],
        "has_more": False,
        "next_page": None,
    }


async def search_stores(
    state: AppState,
    stores: Sequence[stores_db.StoredVectorStore],
    queries: Sequence[str],
    *,
    limit: int,
    filters: Filter | None,
    score_threshold: float,
    semantic_only: bool = False,
) -> list[chunks_db.Found]:
    """The best chunks of these stores for the queries (a 400 for an expired store, a 503 when
    the embedding model fails)."""
    expired = next((store for store in stores if store.expired), None)
    if expired is not None:
        raise errors.InvalidRequest(
            f"Vector store '{expired.id}' has expired.", param="vector_store_id", code="vector_store_expired"
        )
    try:
        return await retrieval.search_stores(
            state.engine,
            state.embedders,
            state.catalog,
            stores,
            queries,
            limit=limit,
            filters=filters,
            score_threshold=score_threshold,
            text_weight=0.0 if semantic_only else 1.0,
        )
    except EmbeddingFailed as failed:
        raise errors.ServiceUnavailable(f"The embedding model could not embed the query: {failed}.") from None

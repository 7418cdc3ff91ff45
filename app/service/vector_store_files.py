"""A vector store's files and file batches: attach (ingested by the workers), list, retrieve,
update attributes, detach, read back as its chunks; batches created, retrieved, cancelled,
listed. A file must be the account's (another's answers as unknown: 404)."""

from __future__ import annotations

from typing import Any, Literal

from app import errors
from app.protocol import vector_store_request
from app.protocol.ids import new_id
from app.protocol.pages import listed
from app.protocol.vector_store_request import FileToAttach
from app.service.state import AppState
from app.service.vector_stores import check_files, enqueue, found
from app.storage import chunks as chunks_db
from app.storage import vector_store_files as store_files_db
from app.storage import vector_stores as stores_db


def file_not_attached(store_id: str, file_id: str) -> errors.NotFound:
    return errors.NotFound(f"No file found with id '{file_id}' in vector store '{store_id}'.")


async def attach(state: AppState, account_id: str, store_id: str, body: dict[str, Any]) -> dict[str, Any]:
    store = await found(state, account_id, store_id)
    wanted = vector_store_request.parse_attach(body)
    attached = await _attach(state, account_id, store, [wanted], None, "file_id")
    return attached[0].render()


async def _attach(
    state: AppState,
    account_id: str,
    store: stores_db.StoredVectorStore,
    wanted: list[FileToAttach],
    batch_id: str | None,
    param: str,
) -> list[store_files_db.StoredStoreFile]:
    if store.expired:
        raise errors.InvalidRequest(f"Vector store '{store.id}' has expired.", code="vector_store_expired")
    async with state.engine.begin() as conn:
        await check_files(conn, account_id, [w.file_id for w in wanted], param, indexed=param != "file_id")
        if batch_id is not None:
            await store_files_db.create_batch(conn, store.id, batch_id)
        attachments = [store_files_db.Attachment(w.file_id, w.attributes, w.chunking or store.chunking) for w in wanted]
        attached = await store_files_db.attach(conn, store.id, attachments, batch_id)
    await enqueue(state, store, attached)
    return attached


async def retrieve(state: AppState, account_id: str, store_id: str, file_id: str) -> dict[str, Any]:
    await found(state, account_id, store_id)
    async with state.engine.connect() as conn:
        attached = await store_files_db.get(conn, store_id, file_id)
    if attached is None:
        raise file_not_attached(store_id, file_id)
    return attached.render()


async def update(state: AppState, account_id: str, store_id: str, file_id: str, body: dict[str, Any]) -> dict[str, Any]:
    await found(state, account_id, store_id)
    attributes = vector_store_request.parse_attributes(body)
    async with state.engine.begin() as conn:
        attached = await store_files_db.set_attributes(conn, store_id, file_id, attributes)
    if attached is None:
        raise file_not_attached(store_id, file_id)
    return attached.render()


async def detach(state: AppState, account_id: str, store_id: str, file_id: str) -> dict[str, Any]:
    await found(state, account_id, store_id)
    async with state.engine.begin() as conn:
        if not await store_files_db.detach(conn, store_id, file_id):
            raise file_not_attached(store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


async def content(state: AppState, account_id: str, store_id: str, file_id: str) -> dict[str, Any]:
    """The file's text as it was chunked: its chunks in order (overlaps included)."""
    await found(state, account_id, store_id)
    async with state.engine.connect() as conn:
        if await store_files_db.get(conn, store_id, file_id) is None:
            raise file_not_attached(store_id, file_id)
        texts = await chunks_db.file_text(conn, store_id, file_id)
    return {
        "object": "vector_store.file_content.page",
        "data": [{"type": "text", "text": text} for text in texts],
        "has_more": False,
        "next_page": None,
    }


async def list_files(
    state: AppState,
    account_id: str,
    store_id: str,
    *,
    status: str | None,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
    before: str | None,
    batch_id: str | None = None,
) -> dict[str, Any]:
    await found(state, account_id, store_id)
    async with state.engine.connect() as conn:
        if batch_id is not None and await store_files_db.get_batch(conn, store_id, batch_id) is None:
            raise batch_not_found(store_id, batch_id)
        cursors = {}
        for name, file_id in (("after", after), ("before", before)):
            cursors[name] = None if file_id is None else await store_files_db.get(conn, store_id, file_id)
            if file_id is not None and cursors[name] is None:
                raise errors.InvalidRequest(
                    f"Invalid '{name}': no file with id '{file_id}' in this vector store.",
                    param=name,
                    code="invalid_value",
                )
        page = await store_files_db.page(
            conn,
            store_id,
            status=status,
            batch_id=batch_id,
            order=order,
            limit=limit,
            after=cursors["after"],
            before=cursors["before"],
        )
    return listed([f.render() for f in page.data], page.has_more)


def batch_not_found(store_id: str, batch_id: str) -> errors.NotFound:
    return errors.NotFound(f"No file batch found with id '{batch_id}' in vector store '{store_id}'.")


async def create_batch(state: AppState, account_id: str, store_id: str, body: dict[str, Any]) -> dict[str, Any]:
    store = await found(state, account_id, store_id)
    wanted = vector_store_request.parse_batch(body)
    batch_id = new_id("vsfb")
    await _attach(state, account_id, store, wanted, batch_id, "files" if "files" in body else "file_ids")
    return await retrieve_batch(state, account_id, store_id, batch_id)


async def retrieve_batch(state: AppState, account_id: str, store_id: str, batch_id: str) -> dict[str, Any]:
    await found(state, account_id, store_id)
    async with state.engine.connect() as conn:
        batch = await store_files_db.get_batch(conn, store_id, batch_id)
        if batch is None:
            raise batch_not_found(store_id, batch_id)
        counts = await store_files_db.batch_counts(conn, batch_id)
    return batch.render(counts)


async def cancel_batch(state: AppState, account_id: str, store_id: str, batch_id: str) -> dict[str, Any]:
    await found(state, account_id, store_id)
    async with state.engine.begin() as conn:
        batch = await store_files_db.cancel_batch(conn, store_id, batch_id)
        if batch is None:
            raise batch_not_found(store_id, batch_id)
        counts = await store_files_db.batch_counts(conn, batch_id)
    return batch.render(counts)

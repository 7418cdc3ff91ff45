"""The `ingest_file` job: one file of one vector store parsed, chunked, embedded and stored.

Claimed with a lease (a second delivery, or a job while another worker holds the file, finds
nothing to do), kept while it runs; the file's bytes go to a temporary file and are read by a
bounded child process (app/documents/isolated.py), its text chunked as it comes. Each batch of
chunks is embedded, then stored in a transaction that first renews the claim: a file cancelled,
detached or deleted meanwhile stops the job there, and its chunks go with it. A job continued
after its worker died skips the chunks stored already (chunking is deterministic), so each chunk
is written once. It ends the file `completed`, or `failed` with `last_error`, exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError

from app.documents.chunking import Chunk, chunks_of
from app.documents.formats import DocumentRefused
from app.documents.isolated import stream_document
from app.embeddings.embedders import Embedder, EmbeddingFailed
from app.storage import chunks as chunks_db
from app.storage import files as files_db
from app.storage import vector_store_files as store_files_db
from workers.state import WorkerState

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # claims of one file: past them, a file whose ingestion keeps dying fails
BATCH = 32  # chunks embedded and stored together
_ERROR_CODES = {"invalid": "invalid_file", "unsupported": "unsupported_file", "too_large": "invalid_file"}


class _Gone(Exception):
    """The file was cancelled, detached or deleted while it was ingested."""


async def ingest_file(ctx: dict[str, Any], store_id: str, file_id: str) -> None:
    state: WorkerState = ctx["state"]
    lease = state.settings.lease_seconds
    async with state.engine.begin() as conn:
        claimed = await store_files_db.claim(conn, store_id, file_id, lease)
    if claimed is None:
        return
    if claimed.attempts > MAX_ATTEMPTS:
        await _end(state, store_id, file_id, "server_error", f"its ingestion was cut short {MAX_ATTEMPTS} times")
        return
    entry = state.catalog.embeddings_by_name.get(claimed.embedding_model)
    if entry is None:
        await _end(state, store_id, file_id, "server_error", f"the embedding model '{claimed.embedding_model}' is gone")
        return
    keeper = asyncio.create_task(_keep_claim(state, store_id, file_id))
    try:
        with tempfile.TemporaryDirectory(prefix="ingest-") as folder:
            path = Path(folder) / "file"
            await _copy(state, file_id, path)
            blocks = stream_document(
                path,
                claimed.filename,
                seconds=state.settings.ingest_read_seconds,
                memory_mb=state.settings.document_read_memory_mb,
            )
            sizes = claimed.chunking
            chunks = chunks_of(blocks, sizes["max_chunk_size_tokens"], sizes["chunk_overlap_tokens"])
            await _store_all(state, store_id, file_id, chunks, state.embedders.of(entry))
        async with state.engine.begin() as conn:
            await store_files_db.end(conn, store_id, file_id, "completed")
    except _Gone:
        log.info("ingestion of %s into %s stopped: the file left the store", file_id, store_id)
    except DocumentRefused as refused:
        await _end(state, store_id, file_id, _ERROR_CODES[refused.reason], f"The file {refused.message}.")
    except EmbeddingFailed as failed:
        await _end(state, store_id, file_id, "server_error", f"It could not be embedded: {failed}.")
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _store_all(state: WorkerState, store_id: str, file_id: str, chunks: Any, embedder: Embedder) -> None:
    async with state.engine.connect() as conn:
        done = await chunks_db.stored_count(conn, store_id, file_id)
    batch: list[Chunk] = []
    async for chunk in chunks:
        if chunk.seq < done:
            continue  # stored by the worker before this one
        batch.append(chunk)
        if len(batch) == BATCH:
            await _store(state, store_id, file_id, batch, embedder)
            batch = []
    await _store(state, store_id, file_id, batch, embedder)


async def _store(state: WorkerState, store_id: str, file_id: str, batch: list[Chunk], embedder: Embedder) -> None:
    if not batch:
        return
    embedded = await embedder.embed([chunk.text for chunk in batch])
    new = [
        chunks_db.NewChunk(chunk.seq, chunk.text, chunk.tokens, vector)
        for chunk, vector in zip(batch, embedded.vectors, strict=True)
    ]
    try:
        async with state.engine.begin() as conn:
            if not await store_files_db.renew(conn, store_id, file_id, state.settings.lease_seconds):
                raise _Gone
            await chunks_db.add(conn, store_id, file_id, new)
    except IntegrityError:
        raise _Gone from None  # its row went between the renewal and the insert


async def _copy(state: WorkerState, file_id: str, path: Path) -> None:
    """The file's bytes to disk, a piece at a time."""
    with path.open("wb") as out:
        async for piece in files_db.content(state.engine, file_id):
            await asyncio.to_thread(out.write, piece)


async def _keep_claim(state: WorkerState, store_id: str, file_id: str) -> None:
    """Renews the claim while the job runs, so that a long parse or embedding keeps the file."""
    lease = state.settings.lease_seconds
    while True:
        await asyncio.sleep(lease / 3)
        with contextlib.suppress(Exception):  # (a missed renewal is retried; the lease has room)
            async with state.engine.begin() as conn:
                if not await store_files_db.renew(conn, store_id, file_id, lease):
                    return


async def _end(state: WorkerState, store_id: str, file_id: str, code: str, message: str) -> None:
    async with state.engine.begin() as conn:
        await store_files_db.end(conn, store_id, file_id, "failed", {"code": code, "message": message})

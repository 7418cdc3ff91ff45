"""The files attached to vector stores, their file batches, and their ingestion's claims.

A file attached is `in_progress` until a worker's ingestion ends it `completed`, `failed` (with
`last_error`) or `cancelled`: each end is a compare-and-set from `in_progress`, so a file ends
once, and a detached file (its row gone) is ended by nobody. A worker claims a file for a lease
(`lease_until`); one whose lease lapsed (its worker died) is claimed again and goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from sqlalchemy import Select, case, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.storage.keyset import keyset_page
from app.storage.tables import vector_store_file_batches, vector_store_files
from app.storage.vector_stores import file_counts


@dataclass(frozen=True, slots=True)
class StoredStoreFile:
    vector_store_id: str
    file_id: str
    status: str
    last_error: dict[str, str] | None
    attributes: dict[str, Any]
    chunking: dict[str, int]
    usage_bytes: int
    created_at: datetime

    def render(self) -> dict[str, Any]:
        return {
            "id": self.file_id,
            "object": "vector_store.file",
            "created_at": int(self.created_at.timestamp()),
            "vector_store_id": self.vector_store_id,
            "usage_bytes": self.usage_bytes,
            "status": self.status,
            "last_error": self.last_error,
            "chunking_strategy": {"type": "static", "static": self.chunking},
            "attributes": self.attributes,
        }


@dataclass(frozen=True, slots=True)
class Attachment:
    file_id: str
    attributes: dict[str, Any]
    chunking: dict[str, int]


_COLUMNS = (
    vector_store_files.c.vector_store_id,
    vector_store_files.c.file_id,
    vector_store_files.c.status,
    vector_store_files.c.last_error,
    vector_store_files.c.attributes,
    vector_store_files.c.chunking,
    vector_store_files.c.usage_bytes,
    vector_store_files.c.created_at,
)


def _file(row: Any) -> StoredStoreFile:
    return StoredStoreFile(*row)


async def attach(
    conn: AsyncConnection, store_id: str, attachments: Sequence[Attachment], batch_id: str | None = None
) -> list[StoredStoreFile]:
    """Attaches the files (ingested by the jobs the caller enqueues). A file attached already
    takes the new attributes (and batch); one that failed or was cancelled is ingested again."""
    if not attachments:
        return []
    statement = insert(vector_store_files).values(
        [
            {
                "vector_store_id": store_id,
                "file_id": a.file_id,
                "attributes": a.attributes,
                "chunking": a.chunking,
                "batch_id": batch_id,
            }
            for a in attachments
        ]
    )
    again = statement.excluded
    retried = vector_store_files.c.status.in_(("failed", "cancelled"))
    statement = statement.on_conflict_do_update(
        index_elements=["vector_store_id", "file_id"],
        set_={
            "attributes": again.attributes,
            "batch_id": func.coalesce(again.batch_id, vector_store_files.c.batch_id),
            "status": case((retried, "in_progress"), else_=vector_store_files.c.status),
            "last_error": case((retried, None), else_=vector_store_files.c.last_error),
            "chunking": case((retried, again.chunking), else_=vector_store_files.c.chunking),
            "attempts": case((retried, 0), else_=vector_store_files.c.attempts),
        },
    )
    rows = await conn.execute(statement.returning(*_COLUMNS))
    return [_file(row) for row in rows]


async def get(conn: AsyncConnection, store_id: str, file_id: str) -> StoredStoreFile | None:
    if "\x00" in file_id:
        return None
    row = (
        await conn.execute(
            select(*_COLUMNS).where(
                vector_store_files.c.vector_store_id == store_id, vector_store_files.c.file_id == file_id
            )
        )
    ).one_or_none()
    return None if row is None else _file(row)


async def set_attributes(
    conn: AsyncConnection, store_id: str, file_id: str, attributes: dict[str, Any]
) -> StoredStoreFile | None:
    row = (
        await conn.execute(
            update(vector_store_files)
            .where(vector_store_files.c.vector_store_id == store_id, vector_store_files.c.file_id == file_id)
            .values(attributes=attributes)
            .returning(*_COLUMNS)
        )
    ).one_or_none()
    return None if row is None else _file(row)


async def detach(conn: AsyncConnection, store_id: str, file_id: str) -> bool:
    """The file leaves the store, its chunks with it (by cascade); a running ingestion of it
    then finds no row to end."""
    if "\x00" in file_id:
        return False
    gone = await conn.execute(
        vector_store_files.delete()
        .where(vector_store_files.c.vector_store_id == store_id, vector_store_files.c.file_id == file_id)
        .returning(vector_store_files.c.file_id)
    )
    return gone.one_or_none() is not None


@dataclass(frozen=True, slots=True)
class StoreFilePage:
    data: list[StoredStoreFile]
    has_more: bool


async def page(
    conn: AsyncConnection,
    store_id: str,
    *,
    status: str | None,
    batch_id: str | None,
    order: Literal["asc", "desc"],
    limit: int,
    after: StoredStoreFile | None,
    before: StoredStoreFile | None,
) -> StoreFilePage:
    query: Select[Any] = select(*_COLUMNS).where(vector_store_files.c.vector_store_id == store_id)
    if status is not None:
        query = query.where(vector_store_files.c.status == status)
    if batch_id is not None:
        query = query.where(vector_store_files.c.batch_id == batch_id)
    rows, has_more = await keyset_page(
        conn,
        query,
        (vector_store_files.c.created_at, vector_store_files.c.file_id),
        ascending=order == "asc",
        limit=limit,
        after=None if after is None else (after.created_at, after.file_id),
        before=None if before is None else (before.created_at, before.file_id),
    )
    return StoreFilePage([_file(row) for row in rows], has_more)


@dataclass(frozen=True, slots=True)
class StoredBatch:
    id: str
    vector_store_id: str
    created_at: datetime
    cancelled: bool

    def render(self, counts: dict[str, int]) -> dict[str, Any]:
        shown = file_counts(counts)
        if self.cancelled:
            status = "cancelled"
        elif shown["in_progress"]:
            status = "in_progress"
        elif shown["total"] and shown["failed"] == shown["total"]:
            status = "failed"
        else:
            status = "completed"
        return {
            "id": self.id,
            "object": "vector_store.files_batch",
            "created_at": int(self.created_at.timestamp()),
            "vector_store_id": self.vector_store_id,
            "status": status,
            "file_counts": shown,
        }


async def create_batch(conn: AsyncConnection, store_id: str, batch_id: str) -> StoredBatch:
    row = (
        await conn.execute(
            insert(vector_store_file_batches)
            .values(id=batch_id, vector_store_id=store_id)
            .returning(vector_store_file_batches.c.created_at)
        )
    ).one()
    return StoredBatch(batch_id, store_id, row.created_at, cancelled=False)


async def get_batch(conn: AsyncConnection, store_id: str, batch_id: str) -> StoredBatch | None:
    if "\x00" in batch_id:
        return None
    row = (
        await conn.execute(
            select(vector_store_file_batches.c.created_at, vector_store_file_batches.c.cancelled_at).where(
                vector_store_file_batches.c.id == batch_id, vector_store_file_batches.c.vector_store_id == store_id
            )
        )
    ).one_or_none()
    return None if row is None else StoredBatch(batch_id, store_id, row.created_at, row.cancelled_at is not None)


async def batch_counts(conn: AsyncConnection, batch_id: str) -> dict[str, int]:
    rows = await conn.execute(
        select(vector_store_files.c.status, func.count())
        .where(vector_store_files.c.batch_id == batch_id)
        .group_by(vector_store_files.c.status)
    )
    return {status: int(n) for status, n in rows}


async def cancel_batch(conn: AsyncConnection, store_id: str, batch_id: str) -> StoredBatch | None:
    """Cancels the batch: its files still in progress end `cancelled` (a running ingestion of one
    then finds it ended, and its chunks go)."""
    row = (
        await conn.execute(
            update(vector_store_file_batches)
            .where(vector_store_file_batches.c.id == batch_id, vector_store_file_batches.c.vector_store_id == store_id)
            .values(cancelled_at=func.coalesce(vector_store_file_batches.c.cancelled_at, func.now()))
            .returning(vector_store_file_batches.c.created_at)
        )
    ).one_or_none()
    if row is None:
        return None
    await conn.execute(
        update(vector_store_files)
        .where(vector_store_files.c.batch_id == batch_id, vector_store_files.c.status == "in_progress")
        .values(status="cancelled", lease_until=None)
    )
    await conn.execute(
        text(
            "DELETE FROM chunks c USING vector_store_files f WHERE f.batch_id = :batch AND f.status = 'cancelled' "
            "AND c.vector_store_id = f.vector_store_id AND c.file_id = f.file_id"
        ),
        {"batch": batch_id},
    )
    return StoredBatch(batch_id, store_id, row.created_at, cancelled=True)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A file a worker now ingests, and what it needs for it."""

    attempts: int
    chunking: dict[str, int]
    embedding_model: str
    filename: str


_CLAIM = text("""
    UPDATE vector_store_files f
    SET lease_until = now() + make_interval(secs => :lease), attempts = f.attempts + 1
    FROM vector_stores s, files fl
    WHERE f.vector_store_id = :store AND f.file_id = :file AND f.status = 'in_progress'
      AND (f.lease_until IS NULL OR f.lease_until < now())
      AND s.id = f.vector_store_id AND fl.id = f.file_id
    RETURNING f.attempts, f.chunking, s.embedding_model, fl.filename
""")


async def claim(conn: AsyncConnection, store_id: str, file_id: str, lease_seconds: float) -> Claimed | None:
    """The file, if it is still to be ingested and no live worker has it (else None)."""
    row = (await conn.execute(_CLAIM, {"store": store_id, "file": file_id, "lease": lease_seconds})).one_or_none()
    return None if row is None else Claimed(row.attempts, row.chunking, row.embedding_model, row.filename)


async def renew(conn: AsyncConnection, store_id: str, file_id: str, lease_seconds: float) -> bool:
    """Keeps the claim (and locks the row to the end of the transaction); False if the file was
    ended (cancelled), detached or deleted meanwhile."""
    row = (
        await conn.execute(
            text(
                "UPDATE vector_store_files SET lease_until = now() + make_interval(secs => :lease) "
                "WHERE vector_store_id = :store AND file_id = :file AND status = 'in_progress' RETURNING 1"
            ),
            {"store": store_id, "file": file_id, "lease": lease_seconds},
        )
    ).one_or_none()
    return row is not None


async def end(
    conn: AsyncConnection, store_id: str, file_id: str, status: str, last_error: dict[str, str] | None = None
) -> bool:
    """Ends the file's ingestion once (from `in_progress`); a file not completed keeps no chunk."""
    if status != "completed":
        await conn.execute(
            text("DELETE FROM chunks WHERE vector_store_id = :store AND file_id = :file"),
            {"store": store_id, "file": file_id},
        )
    row = (
        await conn.execute(
            text("""
                UPDATE vector_store_files SET status = :status, last_error = CAST(:error AS jsonb), lease_until = NULL,
                    usage_bytes = (SELECT coalesce(sum(octet_length(text)), 0) FROM chunks
                                   WHERE vector_store_id = :store AND file_id = :file)
                WHERE vector_store_id = :store AND file_id = :file AND status = 'in_progress'
                RETURNING 1
            """),
            {
                "store": store_id,
                "file": file_id,
                "status": status,
                "error": None if last_error is None else orjson.dumps(last_error).decode(),
            },
        )
    ).one_or_none()
    return row is not None


@dataclass(frozen=True, slots=True)
class LostIngestion:
    vector_store_id: str
    file_id: str
    attempts: int
    embedding_model: str  # the store's: which workers ingest it


async def lost(conn: AsyncConnection, older_than_seconds: float, limit: int = 500) -> list[LostIngestion]:
    """Files still to be ingested whose job may be lost: a lapsed claim (its worker died), or
    none yet long after they were attached (Redis lost the job)."""
    rows = await conn.execute(
        text("""
            SELECT f.vector_store_id, f.file_id, f.attempts, s.embedding_model
            FROM vector_store_files f JOIN vector_stores s ON s.id = f.vector_store_id
            WHERE f.status = 'in_progress' AND f.created_at < now() - make_interval(secs => :older)
              AND (f.lease_until IS NULL OR f.lease_until < now())
            ORDER BY f.created_at LIMIT :limit
        """),
        {"older": older_than_seconds, "limit": limit},
    )
    return [LostIngestion(row.vector_store_id, row.file_id, row.attempts, row.embedding_model) for row in rows]

"""Vector stores: their rows, and what they show of their files (counts by status, bytes).

A store's status and file counts are read from its files' rows, never kept beside them: a
file's every change of status is then its store's, with nothing to fall out of step (the SDK's
batch poller waits on `file_counts.in_progress` reaching 0). Every query is scoped by account.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Select, delete, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.storage.keyset import keyset_page
from app.storage.tables import VECTOR_STORE_FILE_STATUSES, vector_stores

EXPIRED_KEPT_HOURS = 24  # an expired store shows as `expired` this long, then retention removes it


@dataclass(frozen=True, slots=True)
class StoredVectorStore:
    id: str
    name: str | None
    metadata: dict[str, str]
    embedding_model: str
    embedding_dimensions: int
    chunking: dict[str, int]
    expires_after_days: int | None
    last_active_at: datetime
    expires_at: datetime | None
    created_at: datetime
    expired: bool

    def render(self, counts: dict[str, int], usage_bytes: int) -> dict[str, Any]:
        status = "expired" if self.expired else "in_progress" if counts.get("in_progress") else "completed"
        return {
            "id": self.id,
            "object": "vector_store",
            "created_at": int(self.created_at.timestamp()),
            "name": self.name,
            "usage_bytes": usage_bytes,
            "file_counts": file_counts(counts),
            "status": status,
            "expires_after": None
            if self.expires_after_days is None
            else {"anchor": "last_active_at", "days": self.expires_after_days},
            "expires_at": None if self.expires_at is None else int(self.expires_at.timestamp()),
            "last_active_at": int(self.last_active_at.timestamp()),
            "metadata": self.metadata,
        }


def file_counts(counts: dict[str, int]) -> dict[str, int]:
    shown = {status: counts.get(status, 0) for status in VECTOR_STORE_FILE_STATUSES}
    return {**shown, "total": sum(shown.values())}


_COLUMNS = (
    vector_stores.c.id,
    vector_stores.c.name,
    vector_stores.c.metadata,
    vector_stores.c.embedding_model,
    vector_stores.c.embedding_dimensions,
    vector_stores.c.chunking,
    vector_stores.c.expires_after_days,
    vector_stores.c.last_active_at,
    vector_stores.c.expires_at,
    vector_stores.c.created_at,
    func.coalesce(vector_stores.c.expires_at < func.now(), False).label("expired"),
)


def _store(row: Any) -> StoredVectorStore:
    return StoredVectorStore(*row)


def _expiry(days: Any) -> Any:
    return None if days is None else func.now() + func.make_interval(0, 0, 0, days)


async def create(
    conn: AsyncConnection,
    account_id: str,
    store_id: str,
    *,
    name: str | None,
    description: str | None,
    metadata: dict[str, str],
    embedding_model: str,
    embedding_dimensions: int,
    chunking: dict[str, int],
    expires_after_days: int | None,
) -> StoredVectorStore:
    row = (
        await conn.execute(
            insert(vector_stores)
            .values(
                id=store_id,
                account_id=account_id,
                name=name,
                description=description,
                metadata=metadata,
                embedding_model=embedding_model,
                embedding_dimensions=embedding_dimensions,
                chunking=chunking,
                expires_after_days=expires_after_days,
                expires_at=_expiry(expires_after_days),
            )
            .returning(*_COLUMNS)
        )
    ).one()
    return _store(row)


async def get(
    conn: AsyncConnection, account_id: str, store_id: str, *, for_update: bool = False
) -> StoredVectorStore | None:
    if "\x00" in store_id:
        return None
    query = select(*_COLUMNS).where(vector_stores.c.id == store_id, vector_stores.c.account_id == account_id)
    row = (await conn.execute(query.with_for_update() if for_update else query)).one_or_none()
    return None if row is None else _store(row)


async def get_many(conn: AsyncConnection, account_id: str, store_ids: Sequence[str]) -> list[StoredVectorStore]:
    rows = await conn.execute(
        select(*_COLUMNS).where(vector_stores.c.id.in_(store_ids), vector_stores.c.account_id == account_id)
    )
    return [_store(row) for row in rows]


async def update_store(
    conn: AsyncConnection, account_id: str, store_id: str, changes: dict[str, Any]
) -> StoredVectorStore | None:
    """Sets `name`, `metadata` and `expires_after_days` (where `changes` has them); the store is
    active now."""
    values = dict(changes)
    days = values.get("expires_after_days", vector_stores.c.expires_after_days)
    values["last_active_at"] = func.now()
    values["expires_at"] = func.now() + func.make_interval(0, 0, 0, days) if days is not None else None
    row = (
        await conn.execute(
            update(vector_stores)
            .where(vector_stores.c.id == store_id, vector_stores.c.account_id == account_id)
            .values(**values)
            .returning(*_COLUMNS)
        )
    ).one_or_none()
    return None if row is None else _store(row)


async def touch(conn: AsyncConnection, store_ids: Sequence[str]) -> None:
    """The stores were searched: active now, and their expiry moves with it."""
    await conn.execute(
        update(vector_stores)
        .where(vector_stores.c.id.in_(store_ids))
        .values(
            last_active_at=func.now(),
            expires_at=func.now() + func.make_interval(0, 0, 0, vector_stores.c.expires_after_days),
        )
    )


async def remove(conn: AsyncConnection, account_id: str, store_id: str) -> bool:
    """Deletes the store, its files' attachments and their chunks (by cascade)."""
    if "\x00" in store_id:
        return False
    gone = await conn.execute(
        delete(vector_stores)
        .where(vector_stores.c.id == store_id, vector_stores.c.account_id == account_id)
        .returning(vector_stores.c.id)
    )
    return gone.one_or_none() is not None


@dataclass(frozen=True, slots=True)
class StorePage:
    data: list[StoredVectorStore]
    has_more: bool


async def page(
    conn: AsyncConnection,
    account_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: StoredVectorStore | None,
    before: StoredVectorStore | None,
) -> StorePage:
    query: Select[Any] = select(*_COLUMNS).where(vector_stores.c.account_id == account_id)
    rows, has_more = await keyset_page(
        conn,
        query,
        (vector_stores.c.created_at, vector_stores.c.id),
        ascending=order == "asc",
        limit=limit,
        after=None if after is None else (after.created_at, after.id),
        before=None if before is None else (before.created_at, before.id),
    )
    return StorePage([_store(row) for row in rows], has_more)


_COUNTS = text("""
    SELECT vector_store_id, status, count(*) AS n, sum(usage_bytes) AS bytes
    FROM vector_store_files WHERE vector_store_id = ANY(:ids)
    GROUP BY vector_store_id, status
""")


async def counts(conn: AsyncConnection, store_ids: Sequence[str]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Each store's files by status, and the bytes of its chunks."""
    by_status: dict[str, dict[str, int]] = {store_id: {} for store_id in store_ids}
    usage: dict[str, int] = dict.fromkeys(store_ids, 0)
    for row in await conn.execute(_COUNTS, {"ids": list(store_ids)}):
        by_status[row.vector_store_id][row.status] = int(row.n)
        usage[row.vector_store_id] += int(row.bytes or 0)
    return by_status, usage

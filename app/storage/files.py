"""Files: a row per file and its bytes in pieces of 1 MiB (`file_pieces`), written as an upload
streams in and read back piece by piece, so that no process holds a whole file.

An upload's pieces go first and its row last, in the upload's one transaction (the pieces' key
to the row is checked at commit): a cut or refused upload leaves nothing. Every query is scoped
by account: another account's file answers as an unknown one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import delete, func, insert, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.storage.keyset import keyset_page
from app.storage.tables import file_pieces, files


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    filename: str
    purpose: str
    size: int
    content_type: str | None
    created_at: datetime
    expires_at: datetime | None

    def render(self) -> dict[str, Any]:
        """The File object, as OpenAI's: its bytes are stored once they are here (`processed`)."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": int(self.created_at.timestamp()),
            "expires_at": None if self.expires_at is None else int(self.expires_at.timestamp()),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


_COLUMNS = (
    files.c.id,
    files.c.filename,
    files.c.purpose,
    files.c.bytes,
    files.c.content_type,
    files.c.created_at,
    files.c.expires_at,
)


def _file(row: Any) -> StoredFile:
    return StoredFile(*row)


# A file past its expiry is gone for its account at once, before retention removes it.
_LIVE = or_(files.c.expires_at.is_(None), files.c.expires_at > func.now())


async def add_piece(conn: AsyncConnection, file_id: str, seq: int, data: bytes) -> None:
    await conn.execute(insert(file_pieces).values(file_id=file_id, seq=seq, data=data))


async def add_file(
    conn: AsyncConnection,
    account_id: str,
    *,
    file_id: str,
    filename: str,
    purpose: str,
    size: int,
    sha256: str,
    content_type: str | None,
    expires_after_seconds: int | None,
) -> StoredFile:
    """The file's row, once its pieces are written (in the same transaction)."""
    expires_at = None
    if expires_after_seconds is not None:
        expires_at = func.now() + func.make_interval(0, 0, 0, 0, 0, 0, expires_after_seconds)
    row = (
        await conn.execute(
            insert(files)
            .values(
                id=file_id,
                account_id=account_id,
                filename=filename,
                purpose=purpose,
                bytes=size,
                sha256=sha256,
                content_type=content_type,
                expires_at=expires_at,
            )
            .returning(*_COLUMNS)
        )
    ).one()
    return _file(row)


async def lock_account_files(conn: AsyncConnection, account_id: str) -> None:
    """Held to the end of the transaction: uploads of one account commit one at a time, each
    checking what the account keeps with the others' committed."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('files:' || :account))"), {"account": account_id})


async def account_bytes(conn: AsyncConnection, account_id: str) -> int:
    """The bytes of the files the account keeps (expired ones not yet removed included)."""
    total = await conn.scalar(select(func.coalesce(func.sum(files.c.bytes), 0)).where(files.c.account_id == account_id))
    return int(total or 0)


async def get(conn: AsyncConnection, account_id: str, file_id: str) -> StoredFile | None:
    if "\x00" in file_id:
        return None
    row = (
        await conn.execute(select(*_COLUMNS).where(files.c.id == file_id, files.c.account_id == account_id, _LIVE))
    ).one_or_none()
    return None if row is None else _file(row)


@dataclass(frozen=True, slots=True)
class FilePage:
    data: list[StoredFile]
    has_more: bool


async def page(
    conn: AsyncConnection,
    account_id: str,
    *,
    purpose: str | None,
    order: Literal["asc", "desc"],
    limit: int,
    after: StoredFile | None,
) -> FilePage:
    """A page of the account's files by creation, one range of its (account, created_at, id) index."""
    query = select(*_COLUMNS).where(files.c.account_id == account_id, _LIVE)
    if purpose is not None:
        query = query.where(files.c.purpose == purpose)
    rows, has_more = await keyset_page(
        conn,
        query,
        (files.c.created_at, files.c.id),
        ascending=order == "asc",
        limit=limit,
        after=None if after is None else (after.created_at, after.id),
    )
    return FilePage([_file(row) for row in rows], has_more)


async def remove(conn: AsyncConnection, account_id: str, file_id: str) -> bool:
    """Deletes the file and its pieces; False if the account has no such file."""
    if "\x00" in file_id:
        return False
    gone = await conn.execute(
        delete(files).where(files.c.id == file_id, files.c.account_id == account_id).returning(files.c.id)
    )
    return gone.one_or_none() is not None


async def content(engine: AsyncEngine, file_id: str) -> AsyncIterator[bytes]:
    """The file's bytes, a piece at a time, each read by a statement of its own (a slow reader
    holds no connection between pieces)."""
    seq = 0
    while True:
        async with engine.connect() as conn:
            data = await conn.scalar(
                select(file_pieces.c.data).where(file_pieces.c.file_id == file_id, file_pieces.c.seq == seq)
            )
        if data is None:
            return
        yield bytes(data)
        seq += 1

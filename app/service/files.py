"""The Files API: upload (stored as it streams in, refused while it streams once it is past the
file's or the account's limit), list, retrieve, read back and delete. A file is the account's
alone: another account's id answers exactly as an unknown one (404).

An upload runs in one transaction: its pieces are written as they arrive and its row once the
form has ended and its fields are checked (they may come before or after the file), so that
anything refused or cut short leaves nothing behind. Form fields this server does not know are
ignored: SDKs add their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from app import errors
from app.protocol.file_upload import FIELD_MAX_BYTES, FormEvent, PartEnd, PartStart, file_fields
from app.protocol.ids import new_file_id
from app.protocol.pages import listed
from app.service.state import AppState
from app.storage import files as files_db
from app.storage.tables import FILE_PIECE_BYTES


def too_large(limit: int) -> errors.PayloadTooLarge:
    return errors.PayloadTooLarge(f"The file is larger than the limit for one file ({limit:,} bytes).", param="file")


def file_not_found(file_id: str, param: str | None = None) -> errors.NotFound:
    return errors.NotFound(f"No such File object: {file_id}", param=param)


@dataclass(slots=True)
class _Upload:
    """The file part as it streams into its pieces, within `budget` bytes."""

    conn: AsyncConnection
    budget: int
    budget_reason: str
    part: PartStart
    id: str = field(default_factory=new_file_id)
    size: int = 0
    pieces: int = 0
    pending: bytearray = field(default_factory=bytearray)
    digest: Any = field(default_factory=hashlib.sha256)

    @property
    def filename(self) -> str:
        return self.part.filename or "upload"

    @property
    def content_type(self) -> str | None:
        return self.part.content_type

    async def take(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.budget:
            raise errors.PayloadTooLarge(
                f"The file is larger than {self.budget_reason} ({self.budget:,} bytes).", param="file"
            )
        self.digest.update(data)
        self.pending += data
        while len(self.pending) >= FILE_PIECE_BYTES:
            await self._write(bytes(self.pending[:FILE_PIECE_BYTES]))
            del self.pending[:FILE_PIECE_BYTES]

    async def finish(self) -> None:
        if self.pending:
            await self._write(bytes(self.pending))
            self.pending.clear()

    async def _write(self, piece: bytes) -> None:
        await files_db.add_piece(self.conn, self.id, self.pieces, piece)
        self.pieces += 1


async def upload(state: AppState, account_id: str, form: AsyncIterator[FormEvent]) -> dict[str, Any]:
    settings = state.settings
    async with state.engine.begin() as conn:
        room = settings.account_files_max_bytes - await files_db.account_bytes(conn, account_id)
        if settings.file_max_bytes <= room:
            budget, reason = settings.file_max_bytes, "the limit for one file"
        else:
            budget, reason = max(room, 0), "what this account may still store"
        incoming, fields = await _read_form(form, lambda start: _Upload(conn, budget, reason, start))
        checked = file_fields(fields)
        if incoming is None:
            raise errors.InvalidRequest(
                "Missing required parameter: 'file'.", param="file", code="missing_required_parameter"
            )
        if incoming.size == 0:
            raise errors.InvalidRequest("The file is empty.", param="file", code="empty_file")
        await incoming.finish()
        await files_db.lock_account_files(conn, account_id)
        if await files_db.account_bytes(conn, account_id) + incoming.size > settings.account_files_max_bytes:
            raise errors.PayloadTooLarge(
                f"The file is larger than what this account may still store "
                f"({settings.account_files_max_bytes:,} bytes in all).",
                param="file",
            )
        stored = await files_db.add_file(
            conn,
            account_id,
            file_id=incoming.id,
            filename=incoming.filename,
            purpose=checked.purpose,
            size=incoming.size,
            sha256=incoming.digest.hexdigest(),
            content_type=incoming.content_type,
            expires_after_seconds=checked.expires_after_seconds,
        )
    return stored.render()


async def _read_form(
    form: AsyncIterator[FormEvent], start_upload: Callable[[PartStart], _Upload]
) -> tuple[_Upload | None, dict[str, str]]:
    """The form's file part, streamed into an upload as it arrives, and its other fields."""
    incoming: _Upload | None = None
    fields: dict[str, str] = {}
    current: PartStart | None = None
    value = bytearray()
    async for event in form:
        if isinstance(event, PartStart):
            current, value = event, bytearray()
            if event.name == "file":
                if incoming is not None:
                    raise errors.InvalidRequest("Send one 'file' per upload.", param="file", code="invalid_value")
                incoming = start_upload(event)
        elif isinstance(event, PartEnd):
            if current is not None and current.name != "file":
                fields[current.name] = value.decode("utf-8", "replace")
            current = None
        elif current is not None and current.name == "file" and incoming is not None:
            await incoming.take(event)
        else:
            value += event
            if len(value) > FIELD_MAX_BYTES:
                name = current.name if current else "(unnamed)"
                raise errors.InvalidRequest(
                    f"Invalid '{name}': a form field holds at most {FIELD_MAX_BYTES} bytes.", param=name
                )
    return incoming, fields


async def retrieve(state: AppState, account_id: str, file_id: str) -> dict[str, Any]:
    return (await found(state, account_id, file_id)).render()


async def found(state: AppState, account_id: str, file_id: str, param: str | None = None) -> files_db.StoredFile:
    async with state.engine.connect() as conn:
        stored = await files_db.get(conn, account_id, file_id)
    if stored is None:
        raise file_not_found(file_id, param)
    return stored


async def list_files(
    state: AppState,
    account_id: str,
    *,
    purpose: str | None,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
) -> dict[str, Any]:
    async with state.engine.connect() as conn:
        cursor = None
        if after is not None:
            cursor = await files_db.get(conn, account_id, after)
            if cursor is None:
                raise errors.InvalidRequest(
                    f"Invalid 'after': no file with id '{after}'.", param="after", code="invalid_value"
                )
        page = await files_db.page(conn, account_id, purpose=purpose, order=order, limit=limit, after=cursor)
    return listed([stored.render() for stored in page.data], page.has_more)


async def delete(state: AppState, account_id: str, file_id: str) -> dict[str, Any]:
    async with state.engine.begin() as conn:
        if not await files_db.remove(conn, account_id, file_id):
            raise file_not_found(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


def content(state: AppState, stored: files_db.StoredFile) -> AsyncIterator[bytes]:
    return files_db.content(state.engine, stored.id)

"""`input_file` parts read, when the request arrives, into the text the model reads: a stored file
(`file_id`, the account's own), the bytes themselves (`file_data`: base64, or a data URL) or a URL
(`file_url`, fetched through the egress guard as image URLs are). Every file is read before
anything is stored: one that cannot be read is a 400 naming its part, and nothing is kept.

The files of one request hold `RESPONSES_INPUT_FILES_MAX_BYTES` together (OpenAI's 32 MB); a
parsed format is read in a bounded child process (app/documents/isolated.py). For a model that
sees images, a PDF's first pages are drawn as images too, as many as the model may still take
beside the request's own images (its catalog `max_images`), as OpenAI sends a PDF's pages.
"""

from __future__ import annotations

import base64
import binascii
import posixpath

from app import errors
from app.documents.formats import DocumentRefused
from app.documents.isolated import read_document
from app.protocol.input_files import MODEL_IMAGES, MODEL_TEXT, file_parts, framed
from app.protocol.shapes import Item
from app.service.files import file_not_found
from app.service.state import AppState
from app.storage import files as files_db

# A name's extension for a file whose URL gives none, from the type its server declared.
_EXTENSIONS = {
    "application/pdf": ".pdf",
    "text/html": ".html",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}
_REFUSAL_CODES = {"invalid": "invalid_file", "unsupported": "unsupported_file", "too_large": "file_too_large"}


async def read_input_files(
    state: AppState, account_id: str, items: list[Item], param: str = "input", page_images: int = 0
) -> None:
    """Gives every input_file part of these items the text the model reads of it, and a PDF's
    first pages as images while `page_images` (the images the model may still take) lasts."""
    room = state.settings.input_files_max_bytes
    for part, where in file_parts(items, param):
        raw, filename = await _bytes_of(state, account_id, part, where, room)
        room -= len(raw)  # what the files after it may still hold
        try:
            document = await read_document(
                raw,
                filename,
                seconds=state.settings.document_read_seconds,
                memory_mb=state.settings.document_read_memory_mb,
                page_images=page_images,
            )
        except DocumentRefused as refused:
            raise errors.InvalidRequest(
                f"Invalid '{where}': the file '{filename[:200]}' cannot be read: {refused.message}.",
                param=where,
                code=_REFUSAL_CODES[refused.reason],
            ) from None
        part[MODEL_TEXT] = framed(filename, document.text, document.pages)
        if document.page_images:
            part[MODEL_IMAGES] = list(document.page_images)
            page_images -= len(document.page_images)


async def _bytes_of(state: AppState, account_id: str, part: Item, where: str, room: int) -> tuple[bytes, str]:
    if "file_id" in part:
        return await _stored(state, account_id, part["file_id"], f"{where}.file_id", room)
    if "file_data" in part:
        return _decoded(part["file_data"], f"{where}.file_data", room), part["filename"]
    param = f"{where}.file_url"
    if state.urls is None:
        raise errors.InvalidRequest(
            f"Invalid '{param}': this server does not fetch URLs; send the file as 'file_data' or upload it.",
            param=param,
            code="unsupported_value",
        )
    fetched = await state.urls.fetch(part["file_url"], param, what="file", accept="*/*", limit=room)
    filename = part.get("filename") or fetched.filename or "file"
    if not posixpath.splitext(filename)[1]:
        filename += _EXTENSIONS.get(fetched.media_type, "")
    return fetched.body, filename


async def _stored(state: AppState, account_id: str, file_id: str, param: str, room: int) -> tuple[bytes, str]:
    async with state.engine.connect() as conn:
        stored = await files_db.get(conn, account_id, file_id)
    if stored is None:
        raise file_not_found(file_id, param)
    if stored.size > room:
        raise _too_large(param, room)
    raw = bytearray()
    async for piece in files_db.content(state.engine, stored.id):
        raw += piece
    return bytes(raw), stored.filename


def _decoded(data: str, param: str, room: int) -> bytes:
    """`file_data`: base64, or a data URL holding it."""
    if data.startswith("data:"):
        header, separator, data = data.partition(",")
        if not separator or not header.endswith(";base64"):
            raise errors.InvalidRequest(
                f"Invalid '{param}': expected base64 data, or a data URL of the form data:<type>;base64,<data>.",
                param=param,
                code="invalid_base64",
            )
    if len(data) * 3 // 4 > room + 3:
        raise _too_large(param, room)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidRequest(
            f"Invalid '{param}': the file data is not valid base64.", param=param, code="invalid_base64"
        ) from None


def _too_large(param: str, room: int) -> errors.InvalidRequest:
    return errors.InvalidRequest(
        f"Invalid '{param}': the file is larger than the {room:,} bytes this request's files may still hold "
        "(RESPONSES_INPUT_FILES_MAX_BYTES, for all of them together).",
        param=param,
        code="file_too_large",
    )

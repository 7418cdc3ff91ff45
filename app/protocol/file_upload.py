"""A file upload as the Files API reads it: the parts of its multipart form as they stream
(`PartStart`, its data as bytes, `PartEnd`), and its fields checked: `purpose` and
`expires_after` (sent flattened with brackets, `expires_after[anchor]` and
`expires_after[seconds]`, as OpenAI's SDKs encode nested fields in a form)."""

from __future__ import annotations

from dataclasses import dataclass

from app import errors

# The purposes a file may be uploaded with (OpenAI's FilePurpose).
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
BATCH_EXPIRY_SECONDS = 30 * 24 * 3600  # OpenAI's default for `batch` files; others keep until deleted
EXPIRY_SECONDS = (3600, 30 * 24 * 3600)  # what expires_after[seconds] may be
FIELD_MAX_BYTES = 64 * 1024  # a form field that is not the file


@dataclass(frozen=True, slots=True)
class PartStart:
    """A part begins: its form field's name, and for a file its name and declared type."""

    name: str
    filename: str | None
    content_type: str | None


@dataclass(frozen=True, slots=True)
class PartEnd:
    pass


FormEvent = PartStart | bytes | PartEnd


@dataclass(frozen=True, slots=True)
class FileFields:
    purpose: str
    expires_after_seconds: int | None


def file_fields(fields: dict[str, str]) -> FileFields:
    """The upload's fields other than the file, checked; a 400 naming the one at fault."""
    purpose = fields.get("purpose")
    if not purpose:
        raise errors.InvalidRequest(
            "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter"
        )
    if purpose not in FILE_PURPOSES:
        raise errors.InvalidRequest(
            f"Invalid 'purpose': expected one of {', '.join(FILE_PURPOSES)}, got '{purpose[:100]}'.",
            param="purpose",
            code="invalid_value",
        )
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return FileFields(purpose, BATCH_EXPIRY_SECONDS if purpose == "batch" else None)
    if anchor != "created_at":
        raise errors.InvalidRequest(
            f"Invalid 'expires_after.anchor': expected 'created_at', got '{(anchor or '')[:100]}'.",
            param="expires_after.anchor",
            code="invalid_value",
        )
    low, high = EXPIRY_SECONDS
    if seconds is None or not seconds.isascii() or not seconds.isdigit() or not low <= int(seconds) <= high:
        raise errors.InvalidRequest(
            f"Invalid 'expires_after.seconds': expected an integer between {low} and {high}, "
            f"got '{(seconds or '')[:100]}'.",
            param="expires_after.seconds",
            code="invalid_value",
        )
    return FileFields(purpose, int(seconds))

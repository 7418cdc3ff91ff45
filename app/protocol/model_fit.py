"""Whether a valid request fits the model it names: what that model's catalog entry says it can
take. Checked before anything is stored, like every other 400 (design invariant 6)."""

from __future__ import annotations

from app import errors
from app.catalog import ModelEntry
from app.protocol.create_request import ValidatedCreate


def check_fit(create: ValidatedCreate, model: ModelEntry) -> None:
    kind = create.text_format["type"]
    if kind != "text" and model.structured_output == "none":
        raise errors.InvalidRequest(
            f"Invalid 'text.format.type': the model '{model.id}' does not support '{kind}'.",
            param="text.format.type",
            code="unsupported_value",
        )

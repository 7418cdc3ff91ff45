"""`text.format`: plain text, any JSON object, or JSON matching a schema (structured output).

Validated here, before anything is stored, so a schema the model server would choke on is a 400
naming `text.format.schema` rather than a failed response later.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from app import errors
from app.protocol.strict_schema import check_strict
from app.protocol.validation import StrictModel, check_json_schema, validate

PLAIN_TEXT: dict[str, Any] = {"type": "text"}


class _Plain(StrictModel):
    type: Literal["text", "json_object"]


class _JsonSchema(StrictModel):
    model_config = ConfigDict(populate_by_name=True)  # (merged with StrictModel's)

    type: Literal["json_schema"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


def parse_text_format(raw: Any) -> dict[str, Any]:
    """The format as a Response echoes it (and the worker reads it)."""
    if raw is None:
        return PLAIN_TEXT
    if not isinstance(raw, dict):
        raise errors.InvalidRequest("Invalid 'text.format': expected an object.", param="text.format")
    if raw.get("type") != "json_schema":
        if raw.get("type") not in ("text", "json_object"):
            raise errors.InvalidRequest(
                f"Invalid 'text.format.type': unknown value {raw.get('type')!r}; expected 'text', 'json_object' "
                "or 'json_schema'.",
                param="text.format.type",
                code="invalid_value",
            )
        return {"type": validate(_Plain, raw, prefix="text.format").type}
    parsed = validate(_JsonSchema, raw, prefix="text.format")
    check_json_schema(parsed.json_schema, "text.format.schema")
    if parsed.strict:
        check_strict(parsed.json_schema, "text.format.schema")
    return {
        "type": "json_schema",
        "description": parsed.description,
        "name": parsed.name,
        "schema": parsed.json_schema,
        "strict": parsed.strict is True,
    }

"""The bodies of the Conversations API's requests (create, update, items create), checked as a
create request's are: strict, every refusal a 400 naming the parameter."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from app import errors
from app.protocol.create_request import METADATA_VALUE_CHARS, string_map_limits
from app.protocol.input_items import parse_items
from app.protocol.shapes import Item
from app.protocol.validation import StrictModel, validate

MAX_ITEMS_AT_ONCE = 20  # OpenAI's: a create or an items create adds at most this many


class _Create(StrictModel):
    items: list[Any] | None = None
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, METADATA_VALUE_CHARS)


class _Update(StrictModel):
    metadata: dict[str, str] | None = Field()  # required, null allowed (it clears the metadata)

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, METADATA_VALUE_CHARS)


class _AddItems(StrictModel):
    items: list[Any] = Field()


def parse_create(body: dict[str, Any]) -> tuple[dict[str, str], list[Item]]:
    """The new conversation's metadata and its first items."""
    create = validate(_Create, body)
    return create.metadata or {}, _items(create.items or [], allow_none=True)


def parse_update(body: dict[str, Any]) -> dict[str, str]:
    return validate(_Update, body).metadata or {}


def parse_added_items(body: dict[str, Any]) -> list[Item]:
    return _items(validate(_AddItems, body).items, allow_none=False)


def _items(raw: list[Any], *, allow_none: bool) -> list[Item]:
    if not raw and not allow_none:
        raise errors.InvalidRequest(
            "Invalid 'items': empty array. Expected at least one item.", param="items", code="empty_array"
        )
    if len(raw) > MAX_ITEMS_AT_ONCE:
        raise errors.InvalidRequest(
            f"Invalid 'items': {len(raw)} items; at most {MAX_ITEMS_AT_ONCE} can be added at a time.",
            param="items",
            code="array_above_max_length",
        )
    return parse_items(raw, "items")

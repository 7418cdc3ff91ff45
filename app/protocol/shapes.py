"""The JSON shapes everything passes around, named once: a Responses stream event, a Responses
item (input or output) and a tool as a request declares it, each a JSON object as the wire
carries it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias

Event: TypeAlias = dict[str, Any]
Item: TypeAlias = dict[str, Any]
Tool: TypeAlias = dict[str, Any]


def content_parts(items: list[Item], part_type: str, param: str = "input") -> Iterator[tuple[Item, str]]:
    """Every content part of this type in these items (in messages, and in tool outputs), with
    the parameter it sits at (`input[2].content[1]`)."""
    for index, item in enumerate(items):
        field = "content" if item["type"] == "message" else "output"
        parts = item.get(field)
        if not isinstance(parts, list):
            continue
        for position, part in enumerate(parts):
            if part.get("type") == part_type:
                yield part, f"{param}[{index}].{field}[{position}]"

"""The JSON shapes everything passes around, named once: a Responses stream event, a Responses
item (input or output) and a tool as a request declares it, each a JSON object as the wire
carries it."""

from __future__ import annotations

from typing import Any, TypeAlias

Event: TypeAlias = dict[str, Any]
Item: TypeAlias = dict[str, Any]
Tool: TypeAlias = dict[str, Any]

"""Lifecycle events: the ones that carry a whole Response snapshot."""

from __future__ import annotations

from typing import Any

from app.protocol.response_object import ResponseRecord, render
from app.protocol.vocabulary import TERMINAL_EVENT_FOR


def lifecycle_event(event_type: str, record: ResponseRecord) -> dict[str, Any]:
    return {"type": event_type, "response": render(record)}


def terminal_event(record: ResponseRecord) -> dict[str, Any]:
    return lifecycle_event(TERMINAL_EVENT_FOR[record.status], record)

"""Lifecycle events: the ones that carry a whole Response snapshot."""

from __future__ import annotations

from typing import Any

from app.protocol.response_object import ResponseRecord, Status, render

TERMINAL_EVENT_FOR: dict[Status, str] = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    # OpenAI documents no event for this; ours lets a follower end with the cancelled response.
    "cancelled": "response.cancelled",
}


def lifecycle_event(event_type: str, record: ResponseRecord) -> dict[str, Any]:
    return {"type": event_type, "response": render(record)}


def terminal_event(record: ResponseRecord) -> dict[str, Any]:
    return lifecycle_event(TERMINAL_EVENT_FOR[record.status], record)

"""A response's life as the console draws it, from its row and its log's whole events with when
each was committed (app/storage/console.py): spans (waiting for a worker, up to its first output,
each call the server made, each answer of the model) and marks (claimed, steered, continued,
ended), placed on one scale from its creation to its end (or now, while it runs). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.storage.console import TimedEvent

# The calls the server makes itself: each is a span of its own, from its opening to its close.
SERVER_CALLS = ("mcp_call", "mcp_list_tools", "file_search_call", "web_search_call", "tool_search_call")


@dataclass(frozen=True, slots=True)
class Span:
    name: str
    start: datetime
    end: datetime
    detail: str = ""

    @property
    def milliseconds(self) -> float:
        return (self.end - self.start).total_seconds() * 1000


@dataclass(frozen=True, slots=True)
class Mark:
    name: str
    at: datetime
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Timeline:
    start: datetime
    end: datetime
    spans: list[Span]
    marks: list[Mark]
    running: bool

    def offset(self, at: datetime, width: float) -> float:
        """Where a time falls on a scale `width` wide."""
        total = (self.end - self.start).total_seconds() or 1.0
        return round(width * (at - self.start).total_seconds() / total, 1)


def timeline(row: Any, events: Sequence[TimedEvent], steered_at: Sequence[datetime], now: datetime) -> Timeline:
    """`row`: the response's (created_at, status, worker_id, continuations, continued_at, completed_at)."""
    created: datetime = row.created_at
    running = row.completed_at is None
    end: datetime = row.completed_at or now
    in_progress = next((e for e in events if e.type == "response.in_progress"), None)
    claimed = in_progress.committed_at if in_progress is not None else None
    spans = [Span("waiting for a worker", created, claimed or end)]
    marks = [Mark("created", created)]
    if claimed is not None:
        marks.append(Mark("claimed", claimed, f"by {row.worker_id}" if row.worker_id else ""))
        first = next((e for e in events if e.type == "response.output_item.added" and e.item), None)
        if first is not None and first.item is not None:
            spans.append(Span("to first output", claimed, first.committed_at, str(first.item["type"])))
        spans += _calls(events, end)
    marks += [Mark("steered", at) for at in steered_at]
    if row.continuations:
        detail = f"by {row.worker_id}, its continuation {row.continuations} after a worker stopped"
        marks.append(Mark("continued", row.continued_at or claimed or created, detail))
    ended = next((e for e in events if e.type in TERMINAL_EVENT_TYPES), None)
    if ended is not None:
        marks.append(Mark("ended", ended.committed_at, row.status))
    return Timeline(created, max(end, *(s.end for s in spans)), spans, sorted(marks, key=lambda m: m.at), running)


def _calls(events: Sequence[TimedEvent], end: datetime) -> list[Span]:
    """A span per call the server made: from its item's opening to its close (or now)."""
    closed = {e.item["id"]: e.committed_at for e in events if e.type == "response.output_item.done" and e.item}
    spans = []
    for event in events:
        item = event.item
        if event.type != "response.output_item.added" or not item or item.get("type") not in SERVER_CALLS:
            continue
        name = item.get("name") or item.get("server_label") or ""
        spans.append(Span(str(item["type"]), event.committed_at, closed.get(item.get("id"), end), str(name)))
    return spans

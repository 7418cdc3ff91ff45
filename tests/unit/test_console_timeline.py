"""A response's timeline as the console draws it (app/console/timeline.py), from its row and its
log's whole events with their commit times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from app.console.timeline import timeline
from app.storage.console import TimedEvent

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def row(**changes: Any) -> Any:
    fields = {"created_at": T0, "status": "completed", "worker_id": "host:1", "continuations": 0}
    return SimpleNamespace(**{**fields, "continued_at": None, "completed_at": at(900), **changes})


EVENTS = [
    TimedEvent(0, "response.created", at(0)),
    TimedEvent(1, "response.in_progress", at(40)),
    TimedEvent(2, "response.output_item.added", at(60), {"id": "mcp_1", "type": "mcp_call", "name": "lookup"}),
    TimedEvent(3, "response.output_item.done", at(300), {"id": "mcp_1", "type": "mcp_call", "name": "lookup"}),
    TimedEvent(4, "response.output_item.added", at(320), {"id": "msg_1", "type": "message"}),
    TimedEvent(9, "response.completed", at(900)),
]


def test_the_spans_and_marks_of_a_response_that_called_a_tool() -> None:
    drawn = timeline(row(), EVENTS, [at(500)], at(2000))
    spans = [(s.name, s.milliseconds, s.detail) for s in drawn.spans]
    assert spans == [
        ("waiting for a worker", 40.0, ""),
        ("to first output", 20.0, "mcp_call"),
        ("mcp_call", 240.0, "lookup"),
    ]
    marks = [(m.name, m.at, m.detail) for m in drawn.marks]
    assert marks == [
        ("created", at(0), ""),
        ("claimed", at(40), "by host:1"),
        ("steered", at(500), ""),
        ("ended", at(900), "completed"),
    ]
    assert (drawn.start, drawn.end, drawn.running) == (T0, at(900), False)
    assert drawn.offset(at(450), 1000) == 500.0


def test_a_running_response_runs_to_now_and_a_call_in_flight_with_it() -> None:
    running = timeline(row(status="in_progress", completed_at=None), EVENTS[:3], [], at(1000))
    assert running.running and running.end == at(1000)
    assert [(s.name, s.end) for s in running.spans][-1] == ("mcp_call", at(1000))
    queued = timeline(row(status="queued", completed_at=None, worker_id=None), EVENTS[:1], [], at(250))
    assert [(s.name, s.milliseconds) for s in queued.spans] == [("waiting for a worker", 250.0)]


def test_a_continuation_is_marked_when_and_where_it_was_claimed() -> None:
    continued = timeline(row(continuations=1, continued_at=at(700), worker_id="host:2"), EVENTS, [], at(2000))
    [mark] = [m for m in continued.marks if m.name == "continued"]
    assert (mark.at, mark.detail) == (at(700), "by host:2, its continuation 1 after a worker stopped")

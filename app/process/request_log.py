"""What a request leaves behind: one log line when it ends (request id, account, model, status,
durations), and a `Server-Timing` header on a JSON answer with the phases it went through.

The middleware (app/api/middleware.py) opens a `RequestLog` per request and keeps it in a context variable,
so the code a request runs through can note what it learns (`note`) and when a phase ends
(`phase`) without passing it along. With `RESPONSES_LOG_FORMAT=json` every log line, these
included, is one JSON object.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("responses_server.request")


@dataclass(slots=True)
class RequestLog:
    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    phase_started: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # name → milliseconds
    facts: dict[str, str] = field(default_factory=dict)  # account, model, response id
    status: int | None = None

    def __post_init__(self) -> None:
        self.phase_started = self.started

    def server_timing(self) -> str:
        """`validate;dur=1.2, store;dur=3.1, …, total;dur=…`, the time to the answer's headers."""
        total = (time.perf_counter() - self.started) * 1000
        return ", ".join(f"{name};dur={ms:.1f}" for name, ms in [*self.phases.items(), ("total", total)])

    def write(self) -> None:
        duration_ms = round((time.perf_counter() - self.started) * 1000, 1)
        fields = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            **self.facts,
            "duration_ms": duration_ms,
            **{f"{name}_ms": round(ms, 1) for name, ms in self.phases.items()},
        }
        facts = " ".join(f"{key}={value}" for key, value in self.facts.items())
        log.info(
            "%s %s %s %s %s %.1f ms",
            self.method,
            self.path,
            self.status,
            self.request_id,
            facts,
            duration_ms,
            extra={"fields": fields},
        )


CURRENT: ContextVar[RequestLog | None] = ContextVar("request_log", default=None)


def note(**facts: str) -> None:
    """What the request turned out to be about (account, model, response id)."""
    current = CURRENT.get()
    if current is not None:
        current.facts.update(facts)


def phase(name: str) -> None:
    """A phase of the request ended now: its duration is from the end of the one before."""
    current = CURRENT.get()
    if current is not None:
        now = time.perf_counter()
        current.phases[name] = (now - current.phase_started) * 1000
        current.phase_started = now


def since_start(name: str) -> None:
    """A moment of the request (its first token): its time from the request's start."""
    current = CURRENT.get()
    if current is not None and name not in current.phases:
        current.phases[name] = (time.perf_counter() - current.started) * 1000


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(format: str) -> None:
    """The process's logging: `text` (a line a person reads) or `json` (a line a collector parses)."""
    handler = logging.StreamHandler()
    if format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    for noisy in ("httpx", "httpx2"):  # one line per image fetch or MCP request is noise
        logging.getLogger(noisy).setLevel(logging.WARNING)

"""The steps of a generation's start, measured: in the metrics as each step ends
(`responses_start_step_seconds{model, step}`), and in the one log line each generation leaves when
it ends, with its status and output tokens. The steps:

- `queued`: from its job's enqueueing (on the enqueuer's clock) until this worker went for the job,
  on hearing of it, finding it in a poll, or as a slot freed;
- `take`: the job taken from the queue (for a job heard with its data, only its start: the take
  runs beside it, app/queue/arq_seam.py `_run_while_taken`);
- `claim`: the response claimed in Postgres (or Redis, for store=false), its context read;
- `ask`: from the take to the runtime request's start: after the claim, or, for a stored response
  that starts afresh (its job carries it), beside it;
- `first_token`: from the runtime request's start to its first output token (the request, the
  prompt's prefill, the first chunk);
- `commit`: from that token to its events committed and published (for a response that starts
  afresh, the wait for its claim too): its client's first token is on the way from then on.

With `RESPONSES_LOG_FORMAT=json` the log line's steps are fields (`queued_ms`…), with the job's
`enqueued_at` (Unix seconds), so a response's start can be laid beside its create's request line
(app/process/request_log.py) and its client's first token, as bench/stream_benchmark.py does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from app.process.metrics import START_STEP

log = logging.getLogger("responses_server.generation")


@dataclass(slots=True)
class StartTimes:
    """Unix times of a generation's start; None where the job did not come through the queue worker."""

    enqueued: float | None
    heard: float | None
    taken: float | None
    claimed: float | None = None
    asked: float | None = None
    first_token: float | None = None
    committed: float | None = None  # the first output's events, committed and published
    answering: asyncio.Event = field(default_factory=asyncio.Event)  # set at the first output token
    # A job heard with its data: set once the runtime request is out, which lets its take go
    # (app/queue/arq_seam.py `_run_while_taken`).
    under_way: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def of_job(cls, ctx: dict[str, Any]) -> StartTimes:
        enqueued_ms = ctx.get("enqueue_time_ms")
        times = cls(enqueued_ms / 1000 if enqueued_ms else None, ctx.get("heard_at"), ctx.get("taken_at"))
        if (under_way := ctx.get("under_way")) is not None:
            times.under_way = under_way
        return times

    def claimed_now(self, model: str) -> None:
        self.claimed = time.time()
        for step in ("queued", "take", "claim"):
            if (seconds := self._steps().get(step)) is not None:
                START_STEP.labels(model, step).observe(seconds)

    def asked_now(self, model: str) -> None:
        self.asked = time.time()
        if (seconds := self._steps().get("ask")) is not None:
            START_STEP.labels(model, "ask").observe(seconds)

    def first_token_now(self, model: str) -> float:
        self.first_token = time.time()
        self.answering.set()
        if self.asked is not None:
            START_STEP.labels(model, "first_token").observe(self.first_token - self.asked)
        return self.first_token

    def committed_now(self, model: str) -> None:
        self.committed = time.time()
        if self.first_token is not None:
            START_STEP.labels(model, "commit").observe(self.committed - self.first_token)

    def steps_ms(self) -> dict[str, float]:
        return {name: round(seconds * 1000, 1) for name, seconds in self._steps().items()}

    def _steps(self) -> dict[str, float]:
        steps = {
            "queued": (self.enqueued, self.heard),
            "take": (self.heard, self.taken),
            "claim": (self.taken, self.claimed),
            "ask": (self.taken, self.asked),
            "first_token": (self.asked, self.first_token),
            "commit": (self.first_token, self.committed),
        }
        return {name: end - start for name, (start, end) in steps.items() if start is not None and end is not None}


def ended(response_id: str, model: str, status: str, output_tokens: int | None, times: StartTimes) -> None:
    steps = times.steps_ms()
    # From its start: the claim, or the runtime request where that went first.
    started = min((t for t in (times.claimed, times.asked) if t is not None), default=None)
    duration_ms = round((time.time() - started) * 1000, 1) if started is not None else None
    fields: dict[str, Any] = {
        "response_id": response_id,
        "model": model,
        "status": status,
        "output_tokens": output_tokens,
        "enqueued_at": times.enqueued,
        **{f"{name}_ms": ms for name, ms in steps.items()},
        "duration_ms": duration_ms,
    }
    told = [] if output_tokens is None else [f"{output_tokens} output tokens"]
    told.append(", ".join(f"{name.replace('_', ' ')} {ms:.1f} ms" for name, ms in steps.items()) or "not queued")
    if duration_ms is not None:
        told.append(f"{duration_ms:.1f} ms since its start")
    log.info("response %s %s (%s): %s", response_id, status, model, "; ".join(told), extra={"fields": fields})

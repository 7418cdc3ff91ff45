"""The system: each model's queue (waiting, running, the oldest's wait), the workers alive and what
each runs, their model servers, webhook endpoints failing, and the last hour minute by minute
(responses by status, output tokens per second, the time to the first output)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from app.console.charts import bar_chart
from app.console.guard import session_of, state_of
from app.console.rendering import TEMPLATES, page
from app.queue import heartbeats
from app.queue.redis_link import REDIS_DOWN
from app.storage import console as console_db


@page
async def system(request: Request) -> Response:
    session, state = await session_of(request), state_of(request)
    async with state.engine.connect() as conn:
        queues = await console_db.queues(conn)
        webhooks = await console_db.webhooks_failing(conn)
        minutes = await console_db.last_hour(conn)
        running = await console_db.running_by_worker(conn)
    try:
        workers = [
            beat for beat in await heartbeats.workers_alive(state.redis) if _ours(beat, state.settings.queue_name)
        ]
    except REDIS_DOWN:
        workers = None
    charts = [
        bar_chart("Responses created per minute", [(m.label, sum(m.by_status.values())) for m in minutes]),
        bar_chart(
            "Failed responses per minute (by creation)", [(m.label, m.by_status.get("failed", 0)) for m in minutes]
        ),
        bar_chart(
            "Output tokens per second (by the minute of creation)",
            [(m.label, m.output_tokens / 60) for m in minutes],
            "tokens/s",
        ),
        bar_chart("Time to first output, p50", [(m.label, _share(m.first_output_ms, 0.5)) for m in minutes], "ms"),
        bar_chart("Time to first output, p99", [(m.label, _share(m.first_output_ms, 0.99)) for m in minutes], "ms"),
    ]
    by_status: dict[str, int] = {}
    for minute in minutes:
        for status, count in minute.by_status.items():
            by_status[status] = by_status.get(status, 0) + count
    context = {
        "session": session,
        "queues": queues,
        "workers": workers,
        "running": running,
        "webhooks": webhooks,
        "charts": charts,
        "by_status": sorted(by_status.items()),
        "sample": console_db.FIRST_OUTPUT_SAMPLE,
    }
    return TEMPLATES.TemplateResponse(request, "system.html", context)


def _share(values: list[float], share: float) -> float:
    """The value `share` of them do not exceed (0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


def _ours(beat: dict[str, Any], queue_name: str) -> bool:
    """A worker of this deployment: of its queue, or of one of its models' (`<queue>:…`), not of
    another deployment sharing the Redis."""
    queue = str(beat.get("queue") or "")
    return queue == queue_name or queue.startswith(queue_name + ":")

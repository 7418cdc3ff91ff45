"""GET /metrics: the API process's Prometheus metrics (app/process/metrics.py lists them; docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.process.metrics import IN_PROGRESS, LIVE_STREAMS, OLDEST_QUEUED, QUEUED, REGISTRY

# The operators' view of the queue (migration 0010): one indexed read of the active responses per scrape.
_QUEUE = text("""
    SELECT model, queued, in_progress, coalesce(extract(epoch FROM oldest_queued_for), 0) AS oldest FROM queue_health
""")


async def metrics(request: Request) -> Response:
    state = request.app.state.responses
    LIVE_STREAMS.set(state.hub.followers)
    try:
        async with state.engine.connect() as conn:
            rows = (await conn.execute(_QUEUE)).all()
    except Exception:  # the rest is still worth scraping; /ready says what is down
        rows = None
    if rows is not None:
        for gauge in (QUEUED, OLDEST_QUEUED, IN_PROGRESS):
            gauge.clear()  # models with nothing active any more
        for row in rows:
            QUEUED.labels(row.model).set(row.queued)
            OLDEST_QUEUED.labels(row.model).set(float(row.oldest))
            IN_PROGRESS.labels(row.model).set(row.in_progress)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]

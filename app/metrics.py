"""Prometheus metrics of an API process, served at `GET /metrics` (no key: scrapers carry none).

Each process counts for itself; Prometheus sums the replicas.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

REGISTRY = CollectorRegistry()

HOSTED_TOOLS_NOT_OFFERED = Counter(
    "responses_hosted_tools_not_offered",
    "Hosted tools (web_search, file_search…) a request listed that were echoed but not offered to the "
    "model (RESPONSES_HOSTED_TOOLS=ignore), by tool type.",
    ["type"],
    registry=REGISTRY,
)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]

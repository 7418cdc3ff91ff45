"""A worker's own small HTTP port (`RESPONSES_WORKER_PORT`): liveness, readiness and metrics, for
a container's healthcheck, a process manager and Prometheus.

- `GET /health`: 200 while the process answers.
- `GET /ready`: 200 once the worker takes jobs and Postgres, Redis and (for a worker hosting a
  model) its model server answer; else 503 naming what is not ready. While a hosted model
  server starts (vLLM can take minutes), 503 `starting`; once the worker is shutting down (its
  generations finishing or handed over to another worker), 503 `draining`.
- `GET /metrics`: the worker's counters, in Prometheus's text format.

It opens before the model server starts, so that a slow start reads as "not ready" rather than
as a dead process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.process.metrics import REGISTRY
from app.process.readiness import dependency_checks
from workers.state import WorkerState

log = logging.getLogger(__name__)


class WorkerHealth:
    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self.port = port
        self.host = host
        self.state: WorkerState | None = None  # set once the worker is ready to take jobs
        self.registry = CollectorRegistry()
        self.registry.register(_WorkerCollector(self))
        app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/ready", self._ready, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(app, host=host, port=port, lifespan="off", access_log=False, log_config=None)
        self._server = _InsideServer(config)
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._serving = asyncio.create_task(self._server.serve(), name="health-port")
        while not self._server.started:
            if self._serving.done():  # the port could not be bound: say why
                await self._serving
                raise RuntimeError(f"the worker's port {self.port} could not be opened")
            await asyncio.sleep(0.01)
        log.info("worker health port on %s:%d (/health, /ready, /metrics)", self.host, self.port)

    async def close(self) -> None:
        if self._serving is not None:
            self._server.should_exit = True
            await self._serving

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _ready(self, request: Request) -> JSONResponse:
        state = self.state
        if state is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        if state.draining:  # shutting down: no new job for it
            return JSONResponse({"status": "draining"}, status_code=503)
        checks = await dependency_checks(state.engine, state.redis)
        if state.supervisor is not None:
            checks["runtime"] = "ok" if state.supervisor.healthy else "unavailable: restarting"
        ready = all(value == "ok" for value in checks.values())
        return JSONResponse({"status": "ok" if ready else "unavailable", **checks}, status_code=200 if ready else 503)

    async def _metrics(self, request: Request) -> Response:
        body = generate_latest(REGISTRY) + generate_latest(self.registry)  # the shared metrics, then its own
        return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})


class _InsideServer(uvicorn.Server):
    """uvicorn serving on the worker's own event loop, beside arq: the worker's signal handlers
    stay in charge (uvicorn's would take SIGTERM from arq), and it is shut down by `close`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _WorkerCollector(Collector):
    """Read from the worker's own counters at each scrape: nothing is added to the token path."""

    def __init__(self, health: WorkerHealth) -> None:
        self.health = health

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        state = self.health.state
        if state is None:
            return
        yield GaugeMetricFamily(
            "responses_worker_generations_running", "Generations this worker runs now.", value=len(state.running)
        )
        yield CounterMetricFamily(
            "responses_worker_events_committed", "Events the event writer committed.", value=state.writer.events_written
        )
        yield CounterMetricFamily(
            "responses_worker_commits",
            "Commits of the event writer (each a batch of events).",
            value=state.writer.batches,
        )
        if state.supervisor is not None:
            yield CounterMetricFamily(
                "responses_runtime_restarts",
                "Restarts of the model server this worker hosts.",
                value=state.supervisor.restarts,
            )

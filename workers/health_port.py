"""A worker's own small HTTP port (`RESPONSES_WORKER_PORT`): liveness, readiness and metrics, for
a container's healthcheck, a process manager and Prometheus.

- `GET /health`: 200 while the process answers.
- `GET /ready`: 200 once the worker takes jobs and Postgres, Redis and (for a worker hosting a
  model) its model server answer; else 503 naming what is not ready. While a hosted model
  server starts (vLLM can take minutes), 503 `starting`.
- `GET /metrics`: the worker's counters, in Prometheus's text format.

It opens before the model server starts, so that a slow start reads as "not ready" rather than
as a dead process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

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
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        log.info("worker health port on %s:%d (/health, /ready, /metrics)", self.host, self.port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, request: web.Request) -> web.Response:
        state = self.state
        if state is None:
            return web.json_response({"status": "starting"}, status=503)
        checks = await dependency_checks(state.engine, state.redis)
        if state.supervisor is not None:
            checks["runtime"] = "ok" if state.supervisor.healthy else "unavailable: restarting"
        ready = all(value == "ok" for value in checks.values())
        return web.json_response({"status": "ok" if ready else "unavailable", **checks}, status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY) + generate_latest(self.registry)  # the shared metrics, then its own
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


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

"""The heartbeat of a worker's generations: their leases renewed from a thread of its own.

The worker's event loop can be busy for seconds on end (a 10 MB answer being translated and
committed); a renewal waiting its turn there would let the lease lapse while the generation runs
fine, and another process would fail it. This thread has its own event loop, its own Postgres
connection and Redis client, so nothing on the worker's loop delays it.

A loop that stopped for good (a deadlock, a loop that never yields) must not keep its leases
for ever: each round asks the worker's loop to answer, and a loop silent for HUNG_LOOP_SECONDS
gets no more renewals, so its responses are reaped as a dead worker's would be.

Each round also finds the generations to stop: those whose cancel was requested, and those that
are no longer this worker's to run (reaped while the process was stopped, deleted); they are
stopped on the worker's loop at once, so no runtime is read for an answer nobody will get.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from app.process.repeated_failure import RepeatedFailure
from app.queue import redis_servers, transient_runs
from app.queue.redis_link import REDIS_LINK
from app.settings import Settings
from app.storage import responses as responses_db
from app.storage.engine import create_engine

log = logging.getLogger(__name__)

HUNG_LOOP_SECONDS = 120.0


class LeaseKeeper:
    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        running: Callable[[], tuple[frozenset[str], frozenset[str]]],
        stop: Callable[[str], None],
    ) -> None:
        """`running`: the durable and the transient generations running now (read from this
        thread: it must only copy). `stop`: called on the worker's loop for each to stop."""
        self._settings = settings
        self._worker_id = worker_id
        self._running = running
        self._stop = stop
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_answered = time.monotonic()
        self.lapsed = 0  # rounds that renewed nothing because the worker's loop seemed hung

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="lease-keeper", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def _run(self) -> None:
        settings = self._settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
        engine = create_engine(settings)
        redis = redis_servers.client(settings.redis_url)
        interval = settings.lease_seconds / 3
        renewal = RepeatedFailure("renewing the worker's leases", log)
        try:
            while not await asyncio.to_thread(self._closing.wait, interval):
                try:
                    await self._renew(engine, redis)
                except Exception:
                    renewal.failed()
                else:
                    renewal.succeeded()
        finally:
            await redis.aclose()
            await engine.dispose()

    async def _renew(self, engine: AsyncEngine, redis: Redis) -> None:
        assert self._loop is not None
        if time.monotonic() - self._loop_answered > HUNG_LOOP_SECONDS:
            log.error("the worker's event loop has not answered for %.0fs: its leases lapse", HUNG_LOOP_SECONDS)
            self.lapsed += 1
            return
        self._loop.call_soon_threadsafe(self._answered)
        durable, transient = self._running()
        if not durable and not transient:
            return
        if transient:
            await self._say_alive(redis, transient)
        stops: list[str] = []
        if durable:
            async with engine.begin() as conn:
                stops = await responses_db.renew_leases(conn, durable, self._worker_id, self._settings.lease_seconds)
        for response_id in stops:
            self._loop.call_soon_threadsafe(self._stop, response_id)

    async def _say_alive(self, redis: Redis, transient: frozenset[str]) -> None:
        """The keys that tell a transient response's follower its worker lives: set, not only
        extended, so that they are back at once after Redis restarted empty. One round trip for
        all of them; an outage delays nothing else (the durable leases are in Postgres)."""
        with REDIS_LINK.tolerated("keeping store=false responses alive"):
            await transient_runs.say_alive(redis, transient, self._worker_id, self._settings.lease_seconds)

    def _answered(self) -> None:
        self._loop_answered = time.monotonic()

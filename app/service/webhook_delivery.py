"""Webhook deliveries (design invariant 8): every API process and worker sends the outbox's due
deliveries (app/storage/webhooks.py), so they go out while any process of the service is alive.

A delivery is taken for one attempt (its due time pushed past the attempt: a process that dies
mid-attempt leaves it due again), POSTed through the egress guard (app/process/egress.py:
public addresses unless RESPONSES_WEBHOOK_ALLOW names the network) with the same `webhook-id`
on every attempt and a signature made at the attempt, and marked delivered on any 2xx within
RESPONSES_WEBHOOK_TIMEOUT_SECONDS. Otherwise it is due again after a delay that doubles from
RESPONSES_WEBHOOK_RETRY_SECONDS up to an hour, jittered, until RESPONSES_WEBHOOK_GIVE_UP_HOURS
after its event, when it is given up. Attempts run beside each other, at most a few per
endpoint in a process, so a slow or dead endpoint holds up neither the others nor generation.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.process.egress import EgressGuard, EgressRefused
from app.process.metrics import WEBHOOK_DELIVERIES, WEBHOOK_OLDEST_PENDING
from app.protocol import webhook_signing
from app.settings import Settings
from app.storage import webhooks as webhooks_db

log = logging.getLogger(__name__)

PER_ENDPOINT = 4  # attempts to one endpoint in flight in one process
MAX_RETRY_SECONDS = 3600.0
LEASE_MARGIN_SECONDS = 30.0  # beyond the attempt's timeout, before a taken delivery counts as lost
OLDEST_EVERY_SECONDS = 5.0
MIN_WAIT_SECONDS = 0.05


def retry_delay(attempts: int, base: float) -> float:
    """Seconds until the next attempt after `attempts` failed: doubling, capped, ±20 % jitter
    (receivers that failed together do not all come back at once)."""
    return float(min(base * 2 ** (attempts - 1), MAX_RETRY_SECONDS)) * random.uniform(0.8, 1.2)


class WebhookDeliverer:
    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.guard = EgressGuard.from_config(settings.webhook_allow)
        self._client = httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=settings.webhook_timeout_seconds
        )
        self._wake = asyncio.Event()
        self._in_flight: Counter[str] = Counter()  # by endpoint
        self._attempts: set[asyncio.Task[None]] = set()
        self._oldest_read_at = 0.0

    def nudge(self) -> None:
        """Deliveries were written (a background response ended here): look now, not at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Sends due deliveries for ever (a side task)."""
        while True:
            self._wake.clear()
            taken = await self._take()
            for due in taken:
                self._start(due)
            await self._report_oldest()
            if not taken or len(self._attempts) >= self.settings.webhook_concurrency:
                await self._wait()

    async def close(self) -> None:
        for attempt in self._attempts:
            attempt.cancel()
        await asyncio.gather(*self._attempts, return_exceptions=True)
        await self._client.aclose()

    async def _take(self) -> list[webhooks_db.Due]:
        room = self.settings.webhook_concurrency - len(self._attempts)
        if room <= 0:
            return []
        busy = [endpoint for endpoint, n in self._in_flight.items() if n >= PER_ENDPOINT]
        lease = self.settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS
        async with self.engine.begin() as conn:
            return await webhooks_db.take_due(conn, room, PER_ENDPOINT, busy, lease)

    def _start(self, due: webhooks_db.Due) -> None:
        self._in_flight[due.endpoint_id] += 1
        attempt = asyncio.create_task(self._attempt(due), name=f"webhook {due.id}")
        self._attempts.add(attempt)
        attempt.add_done_callback(lambda task: self._ended(task, due.endpoint_id))

    def _ended(self, attempt: asyncio.Task[None], endpoint_id: str) -> None:
        self._attempts.discard(attempt)
        self._in_flight[endpoint_id] -= 1
        if not self._in_flight[endpoint_id]:
            del self._in_flight[endpoint_id]
        self._wake.set()  # room for more
        if not attempt.cancelled() and attempt.exception() is not None:
            log.error("webhook attempt failed unexpectedly", exc_info=attempt.exception())

    async def _wait(self) -> None:
        """Until told, a slot frees, the next delivery is due, or the poll comes round (for what
        other processes wrote)."""
        wait = self.settings.webhook_poll_seconds
        if len(self._attempts) < self.settings.webhook_concurrency:
            async with self.engine.connect() as conn:
                due_in = await webhooks_db.seconds_until_due(conn)
            if due_in is not None:
                # (one due now but not taken is another process's, or its endpoint's slots are full)
                wait = min(wait, max(due_in, MIN_WAIT_SECONDS))
        try:
            await asyncio.wait_for(self._wake.wait(), wait)
        except TimeoutError:
            pass

    async def _attempt(self, due: webhooks_db.Due) -> None:
        status, error = await self._send(due)
        async with self.engine.begin() as conn:
            if error is None:
                await webhooks_db.delivered(conn, due.id, status or 200)
                WEBHOOK_DELIVERIES.labels("delivered").inc()
                return
            delay: float | None = retry_delay(due.attempts, self.settings.webhook_retry_seconds)
            give_up_at = due.created_at + timedelta(hours=self.settings.webhook_give_up_hours)
            if datetime.now(UTC) + timedelta(seconds=delay or 0) > give_up_at:
                delay = None
            await webhooks_db.failed_attempt(conn, due.id, status, error, delay)
        WEBHOOK_DELIVERIES.labels("retried" if delay is not None else "given_up").inc()
        log.info("webhook %s to %s: %s (attempt %d)", due.id, due.url, error, due.attempts)

    async def _send(self, due: webhooks_db.Due) -> tuple[int | None, str | None]:
        """The answer's status, and what went wrong (None: delivered)."""
        headers = webhook_signing.headers(due.id, int(time.time()), due.payload, due.secrets)
        try:
            request = await self.guard.request(self._client, "POST", due.url, headers, due.payload.encode())
            response = await self._client.send(request)
        except EgressRefused as refused:
            return None, f"not sent: {refused}"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if 200 <= response.status_code < 300:
            return response.status_code, None
        return response.status_code, f"answered HTTP {response.status_code}"

    async def _report_oldest(self) -> None:
        now = time.monotonic()
        if now - self._oldest_read_at < OLDEST_EVERY_SECONDS:
            return
        self._oldest_read_at = now
        async with self.engine.connect() as conn:
            WEBHOOK_OLDEST_PENDING.set(await webhooks_db.oldest_pending_seconds(conn))

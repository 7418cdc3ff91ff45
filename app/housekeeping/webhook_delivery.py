"""Webhook deliveries (design invariant 8): every API process and worker sends the outbox's due
deliveries (app/storage/webhooks.py), so they go out while any process of the service is alive.

A delivery is taken for one attempt (its due time pushed past the attempt: a process that dies
mid-attempt leaves it due again once that lease lapses; one that stops gives back at once what it
took and had not ended), POSTed through the egress guard (app/process/egress.py:
public addresses unless RESPONSES_WEBHOOK_ALLOW names the network) with the same `webhook-id`
on every attempt and a signature made at the attempt, and marked delivered on any 2xx within
RESPONSES_WEBHOOK_TIMEOUT_SECONDS. Otherwise it is due again after a delay that doubles from
RESPONSES_WEBHOOK_RETRY_SECONDS up to an hour, jittered, until RESPONSES_WEBHOOK_GIVE_UP_HOURS
after its event, when it is given up. Attempts run beside each other, at most PER_ENDPOINT to
an endpoint in a process and PER_FAILING_ENDPOINT to one whose last attempt failed, so a slow
or dead endpoint holds up neither the others nor generation. Each turn of the loop is one
statement (the outcomes of the attempts that ended, and the next due): a delivery costs about
a millisecond of CPU (bench/webhook_benchmark.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import aiohttp

from app.process.egress import EgressGuard, EgressRefused
from app.process.metrics import WEBHOOK_DELIVERIES, WEBHOOK_OLDEST_PENDING
from app.process.repeated_failure import RepeatedFailure
from app.protocol import webhook_signing
from app.settings import Settings
from app.storage import webhooks as webhooks_db
from app.storage.driver import autocommit
from app.storage.engine import create_engine

log = logging.getLogger(__name__)

PER_ENDPOINT = 16  # attempts to one endpoint in flight in one process
PER_FAILING_ENDPOINT = 2  # … to one whose last attempt here failed, until one succeeds
MAX_RETRY_SECONDS = 3600.0
LEASE_MARGIN_SECONDS = 30.0  # beyond the attempt's timeout, before a taken delivery counts as lost
CLOSE_PATIENCE_SECONDS = 5.0  # for a take in flight at a stop, whose deliveries are then given back
OLDEST_EVERY_SECONDS = 5.0
MIN_WAIT_SECONDS = 0.05
# What a delivery given back at a stop records (due again at once, for any process).
INTERRUPTED = "interrupted: the process sending it stopped"


def retry_delay(attempts: int, base: float) -> float:
    """Seconds until the next attempt after `attempts` failed: doubling, capped, ±20 % jitter
    (receivers that failed together do not all come back at once)."""
    return float(min(base * 2 ** (attempts - 1), MAX_RETRY_SECONDS)) * random.uniform(0.8, 1.2)


class WebhookDeliverer:
    def __init__(self, settings: Settings) -> None:
        # A pool of its own, one statement at a time: it never waits behind requests for a
        # connection, nor takes one they wait for.
        self.engine = create_engine(settings, pool_size=1, max_overflow=0)
        self.settings = settings
        self.guard = EgressGuard.from_config(settings.webhook_allow)
        self._session: aiohttp.ClientSession | None = None  # made in the loop that uses it
        self._wake = asyncio.Event()
        self._in_flight: Counter[str] = Counter()  # by endpoint
        self._failing: set[str] = set()  # endpoints whose last attempt here failed
        self._attempts: dict[asyncio.Task[None], str] = {}  # in flight, with their deliveries' ids
        self._attempted: list[webhooks_db.Attempted] = []  # outcomes not recorded yet
        self._taken_at_stop: list[str] = []  # taken by a turn that a stop cut short: never started
        self._oldest_read_at = 0.0

    def nudge(self) -> None:
        """Deliveries were written (a background response ended here): look now, not at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Sends due deliveries for ever (a side task). Each turn is one statement: it records
        the outcomes of the attempts that ended and takes what is due. While the database is
        away, turns fail (logged when that begins and ends) and are tried again each poll."""
        failure = RepeatedFailure("webhook delivery's turn", log)
        while True:
            self._wake.clear()
            room = max(self.settings.webhook_concurrency - len(self._attempts), 0)
            try:
                taken = await self._turn(room)
            except Exception:
                failure.failed()
                await asyncio.sleep(self.settings.webhook_poll_seconds)
                continue
            failure.succeeded()
            if len(taken.due) < room or room == 0:  # (a full take: there may be more)
                await self._wait(taken.seconds_until_due)

    async def _turn(self, room: int) -> webhooks_db.Taken:
        attempted = self._attempted[:]
        taking = asyncio.ensure_future(self._record_and_take(attempted, room))
        try:
            taken = await asyncio.shield(taking)
        except asyncio.CancelledError:
            # Stopping: what the statement took is given back by `close`, not left leased.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_PATIENCE_SECONDS):
                    taken = await taking
                del self._attempted[: len(attempted)]
                self._taken_at_stop = [due.id for due in taken.due]
            raise
        del self._attempted[: len(attempted)]  # (kept for the next turn if that failed)
        for outcome in attempted:
            WEBHOOK_DELIVERIES.labels(_outcome_label(outcome)).inc()
        for due in taken.due:
            self._start(due)
        await self._report_oldest()
        return taken

    async def close(self) -> None:
        """Cancels the attempts in flight and gives them back, due again at once (a receiver may
        have had one: it is sent again with its id, as after any failed attempt), with what was
        taken and not yet started; and records the outcomes of those that ended, so that none of
        those is sent twice. (Once `run` has ended: the side tasks are closed first.)"""
        in_flight = dict(self._attempts)
        for attempt in in_flight:
            attempt.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        unended = [due_id for attempt, due_id in in_flight.items() if attempt.cancelled()] + self._taken_at_stop
        given_back = [webhooks_db.Attempted(due_id, False, None, INTERRUPTED, 0.0) for due_id in unended]
        outcomes = [*self._attempted, *given_back]
        try:
            async with autocommit(self.engine) as conn:
                await webhooks_db.record_and_take(conn, outcomes, 0, PER_ENDPOINT, {}, 0)
        except Exception:
            log.warning("the outcomes of %d webhook attempts were not recorded", len(outcomes), exc_info=True)
        await self.engine.dispose()

    def _rooms(self) -> dict[str, int]:
        """The endpoints that may take fewer than PER_ENDPOINT more now."""
        rooms = {endpoint: PER_ENDPOINT - n for endpoint, n in self._in_flight.items()}
        rooms.update({endpoint: PER_FAILING_ENDPOINT - self._in_flight[endpoint] for endpoint in self._failing})
        return rooms

    async def _record_and_take(self, attempted: list[webhooks_db.Attempted], room: int) -> webhooks_db.Taken:
        if room == 0 and not attempted:
            return webhooks_db.Taken([], None)
        lease = self.settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS
        async with autocommit(self.engine) as conn:
            return await webhooks_db.record_and_take(conn, attempted, room, PER_ENDPOINT, self._rooms(), lease)

    def _start(self, due: webhooks_db.Due) -> None:
        self._in_flight[due.endpoint_id] += 1
        attempt = asyncio.create_task(self._attempt(due), name=f"webhook {due.id}")
        self._attempts[attempt] = due.id
        attempt.add_done_callback(lambda task: self._ended(task, due.endpoint_id))

    def _ended(self, attempt: asyncio.Task[None], endpoint_id: str) -> None:
        del self._attempts[attempt]
        self._in_flight[endpoint_id] -= 1
        if not self._in_flight[endpoint_id]:
            del self._in_flight[endpoint_id]
        self._wake.set()  # its outcome to record, and room for more
        if not attempt.cancelled() and attempt.exception() is not None:
            log.error("webhook attempt failed unexpectedly", exc_info=attempt.exception())

    async def _wait(self, seconds_until_due: float | None) -> None:
        """Until told, an attempt ends, the next delivery this process can take is due, or the
        poll comes round (for what other processes wrote)."""
        wait = self.settings.webhook_poll_seconds
        if seconds_until_due is not None:
            # (one due now but not taken is another process's, or its endpoint's slots are full)
            wait = min(wait, max(seconds_until_due, MIN_WAIT_SECONDS))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._wake.wait()

    async def _attempt(self, due: webhooks_db.Due) -> None:
        status, error = await self._send(due)
        if error is None:
            self._failing.discard(due.endpoint_id)
            self._attempted.append(webhooks_db.Attempted(due.id, True, status, None, None))
            return
        self._failing.add(due.endpoint_id)
        delay: float | None = retry_delay(due.attempts, self.settings.webhook_retry_seconds)
        give_up_at = due.created_at + timedelta(hours=self.settings.webhook_give_up_hours)
        if datetime.now(UTC) + timedelta(seconds=delay or 0) > give_up_at:
            delay = None
        self._attempted.append(webhooks_db.Attempted(due.id, False, status, error, delay))
        log.info("webhook %s to %s: %s (attempt %d)", due.id, due.url, error, due.attempts)

    async def _send(self, due: webhooks_db.Due) -> tuple[int | None, str | None]:
        """The answer's status, and what went wrong (None: delivered)."""
        headers = webhook_signing.headers(due.id, int(time.time()), due.payload, due.secrets)
        try:
            to = await self.guard.destination(due.url)
            answer = await self._http().post(
                to.url,
                data=due.payload.encode(),
                headers={"Host": to.host, "Content-Type": "application/json", **headers},
                server_hostname=to.server_name,
                allow_redirects=False,
            )
            answer.release()  # (its body is not read: the status decides)
        except EgressRefused as refused:
            return None, f"not sent: {refused}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if 200 <= answer.status < 300:
            return answer.status, None
        return answer.status, f"answered HTTP {answer.status}"

    def _http(self) -> aiohttp.ClientSession:
        # aiohttp (not httpx, which the image fetcher uses): a third of the CPU a request costs
        # here, which a burst of deliveries beside generation feels.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.webhook_timeout_seconds),
                # The trust store as it is now: SSL_CERT_FILE may add an internal CA.
                connector=aiohttp.TCPConnector(limit=0, ssl=ssl.create_default_context()),
                auto_decompress=False,
            )
        return self._session

    async def _report_oldest(self) -> None:
        now = time.monotonic()
        if now - self._oldest_read_at < OLDEST_EVERY_SECONDS:
            return
        self._oldest_read_at = now
        async with self.engine.connect() as conn:
            WEBHOOK_OLDEST_PENDING.set(await webhooks_db.oldest_pending_seconds(conn))


def _outcome_label(outcome: webhooks_db.Attempted) -> str:
    if outcome.delivered:
        return "delivered"
    return "retried" if outcome.retry_after_seconds is not None else "given_up"

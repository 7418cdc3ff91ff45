"""Webhooks (design invariant 8): every way a background response ends writes its deliveries with
its end; they arrive signed as the OpenAI SDK checks, retried with one webhook-id until accepted
or given up; a dead endpoint holds up no other; the egress guard refuses private addresses
before connecting. The receivers listen on loopback (allowed in the tests' settings)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import ssl
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy.exc
import trustme
from sqlalchemy import select, text, update

from app.housekeeping import reaper
from app.housekeeping.webhook_delivery import INTERRUPTED, PER_ENDPOINT, PER_FAILING_ENDPOINT, WebhookDeliverer
from app.process.metrics import REGISTRY
from app.queue.redis_keys import events_channel
from app.service import stopping
from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage import responses as responses_db
from app.storage import webhooks as webhooks_db
from app.storage.tables import responses, webhook_deliveries
from tests.conftest import Environment, FakeRuntime, within
from tests.integration.conftest import OpenWorker, accept, run_job
from tests.webhook_receiver import Receiver

SDK = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")  # only its `webhooks.unwrap` is used


@pytest.fixture
async def account(state: AppState) -> AsyncIterator[str]:
    """An account of the test's own, so no other test's endpoints hear of its responses; its
    endpoints, and their deliveries still being retried, go with the test."""
    async with state.engine.begin() as conn:
        account_id = await accounts_db.ensure_account(conn, f"hooks-{secrets.token_hex(4)}")
    yield account_id
    async with state.engine.begin() as conn:
        await conn.execute(text("DELETE FROM webhook_endpoints WHERE account_id = :a"), {"a": account_id})


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


async def endpoint(state: AppState, account: str, url: str, events: tuple[str, ...] = webhooks_db.EVENT_TYPES) -> str:
    """A new endpoint's secret."""
    async with state.engine.begin() as conn:
        return (await webhooks_db.add_endpoint(conn, account, url, events))[1]


async def deliveries(state: AppState, response_id: str) -> list[Any]:
    async with state.engine.connect() as conn:
        query = select(webhook_deliveries).where(webhook_deliveries.c.response_id == response_id)
        return list((await conn.execute(query)).all())


async def ended_in_background(state: AppState, account: str, worker: OpenWorker, **body: Any) -> str:
    response_id = await accept(state, account, background=True, **body)
    await run_job(await worker(), response_id)
    return response_id


async def test_a_background_response_that_ends_is_delivered_as_the_sdk_checks(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    secret = await endpoint(state, account, receiver.url)
    response_id = await ended_in_background(state, account, open_worker, input="hello")
    [received] = await receiver.arrival(1)
    event = SDK.webhooks.unwrap(received.body, received.headers, secret=secret)
    assert (event.type, event.data.id, event.object) == ("response.completed", response_id, "event")
    assert event.id == received.headers["webhook-id"] and event.id.startswith("evt_")
    assert json.loads(received.body) == {
        "id": event.id,
        "object": "event",
        "type": "response.completed",
        "created_at": event.created_at,
        "data": {"id": response_id},
    }
    await asyncio.sleep(0.2)  # (its row is marked after the answer)
    [row] = await deliveries(state, response_id)
    assert row.delivered_at is not None and row.attempts == 1 and row.last_status == 200


async def test_a_receiver_that_fails_three_times_gets_one_event_in_four_attempts_with_one_id(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    receiver.statuses = [500, 503, 404]
    secret = await endpoint(state, account, receiver.url)
    response_id = await ended_in_background(state, account, open_worker, input="hello")
    received = await receiver.arrival(4)
    assert len({r.headers["webhook-id"] for r in received}) == 1
    for attempt in received:  # each attempt signed at its own time, each valid
        assert SDK.webhooks.unwrap(attempt.body, attempt.headers, secret=secret).data.id == response_id
    await asyncio.sleep(0.2)
    [row] = await deliveries(state, response_id)
    assert (row.attempts, row.last_status) == (4, 200) and row.delivered_at is not None
    # Backing off: each wait longer than the one before.
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    assert gaps[0] < gaps[2]


async def test_every_way_a_background_response_ends_announces_its_event(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    await endpoint(state, account, receiver.url)
    completed = await ended_in_background(state, account, open_worker, input="hello")
    failed = await ended_in_background(state, account, open_worker, input='#fake {"status": 400}')
    cut = await ended_in_background(state, account, open_worker, input="one two three " * 20, max_output_tokens=16)
    cancelled = await accept(state, account, input="never runs", background=True)
    await stopping.cancel(state, account, cancelled)
    reaped = await accept(state, account, input="orphan", background=True)
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, reaped, "dead-worker", 30) is not None
        await conn.execute(
            update(responses).where(responses.c.id == reaped).values(lease_expires_at=responses_db.db_now(-1))
        )
    channel = events_channel(state.settings.queue_name)
    assert reaped in await reaper.reap_expired_leases(state.engine, state.redis, channel, state.continuations)
    received = await receiver.arrival(5)
    told = {json.loads(r.body)["data"]["id"]: json.loads(r.body)["type"] for r in received}
    assert told == {
        completed: "response.completed",
        failed: "response.failed",
        cut: "response.incomplete",
        cancelled: "response.cancelled",
        reaped: "response.failed",
    }


async def test_only_background_responses_and_subscribed_events_are_announced(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    await endpoint(state, account, receiver.url, events=("response.failed",))
    foreground = await accept(state, account, input="hello")
    await run_job(await open_worker(), foreground)
    completed = await ended_in_background(state, account, open_worker, input="hello")
    failed = await ended_in_background(state, account, open_worker, input='#fake {"status": 400}')
    [received] = await receiver.arrival(1)
    assert json.loads(received.body)["data"]["id"] == failed
    assert await deliveries(state, foreground) == [] and await deliveries(state, completed) == []


async def test_a_dead_endpoint_does_not_hold_up_a_healthy_one(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    dead = Receiver(delay=30.0).start()  # answers nothing within the attempt's time (2 s here)
    try:
        await endpoint(state, account, dead.url)
        await endpoint(state, account, receiver.url)
        worker = await open_worker()
        ids = [await accept(state, account, input=f"job {n}", background=True) for n in range(12)]
        await asyncio.gather(*(run_job(worker, response_id) for response_id in ids))
        received = await receiver.arrival(12, timeout=5.0)
        assert {json.loads(r.body)["data"]["id"] for r in received} == set(ids)
        assert max(r.at for r in received) - min(r.at for r in received) < 2.0  # none waited for a dead one
    finally:
        dead.stop()


async def test_a_private_address_is_refused_before_any_connection(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime
) -> None:
    await endpoint(state, account, "http://10.255.255.1:9/hook")  # (not in RESPONSES_WEBHOOK_ALLOW)
    response_id = await ended_in_background(state, account, open_worker, input="hello")
    for _ in range(100):
        [row] = await deliveries(state, response_id)
        if row.last_error is not None:
            break
        await asyncio.sleep(0.05)
    assert row.last_error.startswith("not sent: its host resolves to 10.255.255.1")
    assert row.last_status is None and row.delivered_at is None


async def test_a_delivery_whose_process_died_mid_attempt_is_taken_again_with_its_id(
    state: AppState, account: str, receiver: Receiver
) -> None:
    async with state.engine.begin() as conn:
        endpoint_id, _ = await webhooks_db.add_endpoint(conn, account, receiver.url, webhooks_db.EVENT_TYPES)
        await conn.execute(
            text(
                "INSERT INTO webhook_deliveries (id, endpoint_id, response_id, type, payload, next_attempt_at)"
                " VALUES ('evt_lost', :e, 'resp_x', 'response.completed', '{}', now() + interval '1 hour')"
            ),
            {"e": endpoint_id},
        )
        await conn.execute(text("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = 'evt_lost'"))
        taken = {
            due.id: due for due in (await webhooks_db.record_and_take(conn, [], 1000, 1000, {}, lease_seconds=0.2)).due
        }
    assert taken["evt_lost"].attempts == 1  # then "the process died"
    received = await receiver.arrival(1)  # once its lease lapsed, another deliverer took it
    assert received[0].headers["webhook-id"] == "evt_lost"
    await asyncio.sleep(0.2)
    async with state.engine.connect() as conn:
        attempts = await conn.scalar(text("SELECT attempts FROM webhook_deliveries WHERE id = 'evt_lost'"))
    assert attempts == 2


async def taken_by_hand(state: AppState, account: str, url: str, delivery_id: str) -> webhooks_db.Due:
    """A delivery leased for an hour, as if a deliverer had just taken it (no other can take it)."""
    async with state.engine.begin() as conn:
        endpoint_id, secret = await webhooks_db.add_endpoint(conn, account, url, webhooks_db.EVENT_TYPES)
        created_at = await conn.scalar(
            text(
                "INSERT INTO webhook_deliveries (id, endpoint_id, response_id, type, payload, attempts,"
                " next_attempt_at) VALUES (:id, :e, 'resp_x', 'response.completed', '{}', 1,"
                " now() + interval '1 hour') RETURNING created_at"
            ),
            {"id": delivery_id, "e": endpoint_id},
        )
    return webhooks_db.Due(delivery_id, endpoint_id, url, "{}", [secret], 1, created_at)


@contextlib.asynccontextmanager
async def kept_from_other_deliverers(state: AppState, delivery_id: str) -> AsyncIterator[None]:
    """While open, no deliverer takes the delivery (their `FOR UPDATE SKIP LOCKED` skips a row
    under a key-share lock) and its outcomes are still recorded (an update of no key column
    does not wait for one): what a stop leaves is then seen before the session's deliverer acts."""
    async with state.engine.begin() as conn:
        await conn.execute(text("SELECT 1 FROM webhook_deliveries WHERE id = :id FOR KEY SHARE"), {"id": delivery_id})
        yield


async def given_back(state: AppState, delivery_id: str) -> Any:
    async with state.engine.connect() as conn:
        query = text(
            "SELECT next_attempt_at <= now() AS due, last_error, delivered_at FROM webhook_deliveries WHERE id = :id"
        )
        return (await conn.execute(query, {"id": delivery_id})).one()


async def test_an_attempt_in_flight_when_its_process_stops_is_given_back_and_sent_again_at_once(
    state: AppState, account: str, receiver: Receiver
) -> None:
    """A stop does not leave a delivery leased (two seconds and a margin here, minutes in
    production): the session's deliverer sends it again at once, with its id."""
    receiver.delay = 10.0  # the first attempt is still waiting for its answer when its process stops
    delivery_id = f"evt_stopped_{secrets.token_hex(4)}"
    due = await taken_by_hand(state, account, receiver.url, delivery_id)
    stopping = WebhookDeliverer(state.settings)
    stopping._start(due)
    await receiver.arrival(1)
    receiver.delay = 0.0
    async with kept_from_other_deliverers(state, delivery_id):
        await stopping.close()
        row = await given_back(state, delivery_id)
    assert row.due and row.last_error == INTERRUPTED and row.delivered_at is None
    received = await receiver.arrival(2, timeout=5)
    assert [r.headers["webhook-id"] for r in received] == [delivery_id, delivery_id]


async def test_a_take_in_flight_when_its_process_stops_is_given_back(
    state: AppState, account: str, receiver: Receiver
) -> None:
    """The stop cancels the deliverer while the statement that takes is under way: what that
    statement took is given back, not left leased and never attempted."""
    delivery_id = f"evt_taking_{secrets.token_hex(4)}"
    due = await taken_by_hand(state, account, receiver.url, delivery_id)
    stopping = WebhookDeliverer(state.settings)
    asked, answer = asyncio.Event(), asyncio.Event()

    async def take_under_way(attempted: list[webhooks_db.Attempted], room: int) -> webhooks_db.Taken:
        asked.set()
        await answer.wait()  # (its lease was taken by hand)
        return webhooks_db.Taken([due], None)

    stopping._record_and_take = take_under_way  # type: ignore[method-assign]
    running = asyncio.create_task(stopping.run())
    await within(asked.wait(), 5)
    running.cancel()
    answer.set()
    await asyncio.gather(running, return_exceptions=True)
    async with kept_from_other_deliverers(state, delivery_id):
        await stopping.close()
        row = await given_back(state, delivery_id)
        assert receiver.received == []  # never attempted by the deliverer that took it
    assert row.due and row.last_error == INTERRUPTED
    received = await receiver.arrival(1, timeout=5)
    assert received[0].headers["webhook-id"] == delivery_id


async def test_a_delivery_past_its_window_is_given_up(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    receiver.statuses = [500] * 1000
    await endpoint(state, account, receiver.url)
    given_up = REGISTRY.get_sample_value("responses_webhook_deliveries_total", {"outcome": "given_up"}) or 0.0
    response_id = await ended_in_background(state, account, open_worker, input="hello")
    async with state.engine.begin() as conn:  # as if its 72 hours had passed
        await conn.execute(
            update(webhook_deliveries)
            .where(webhook_deliveries.c.response_id == response_id)
            .values(created_at=text("now() - interval '73 hours'"))
        )
    for _ in range(200):
        [row] = await deliveries(state, response_id)
        if row.failed_at is not None:
            break
        await asyncio.sleep(0.05)
    assert row.failed_at is not None and row.delivered_at is None and row.last_status == 500
    assert REGISTRY.get_sample_value("responses_webhook_deliveries_total", {"outcome": "given_up"}) == given_up + 1


async def test_after_a_rotation_both_secrets_verify_for_a_day(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    old = await endpoint(state, account, receiver.url)
    async with state.engine.begin() as conn:
        [listed] = await webhooks_db.list_endpoints(conn, await _name(conn, account))
        new = await webhooks_db.rotate_secret(conn, listed.id)
    assert new is not None and new != old
    response_id = await ended_in_background(state, account, open_worker, input="hello")
    [received] = await receiver.arrival(1)
    assert received.headers["webhook-signature"].count("v1,") == 2
    for secret in (old, new):
        assert SDK.webhooks.unwrap(received.body, received.headers, secret=secret).data.id == response_id
    async with state.engine.begin() as conn:  # a day later only the new one signs
        await conn.execute(text("UPDATE webhook_endpoints SET rotated_at = now() - interval '25 hours'"))
    later = await ended_in_background(state, account, open_worker, input="again")
    received = (await receiver.arrival(2))[1]
    assert received.headers["webhook-signature"].count("v1,") == 1
    assert SDK.webhooks.unwrap(received.body, received.headers, secret=new).data.id == later
    with pytest.raises(openai.InvalidWebhookSignatureError):
        SDK.webhooks.unwrap(received.body, received.headers, secret=old)


async def _name(conn: Any, account_id: str) -> str:
    return str(await conn.scalar(text("SELECT name FROM accounts WHERE id = :id"), {"id": account_id}))


def test_retries_back_off_with_jitter_up_to_an_hour() -> None:
    from app.housekeeping.webhook_delivery import retry_delay

    assert 0.8 * 5 <= retry_delay(1, 5.0) <= 1.2 * 5
    assert 0.8 * 40 <= retry_delay(4, 5.0) <= 1.2 * 40
    assert retry_delay(30, 5.0) <= 1.2 * 3600
    assert len({round(retry_delay(3, 5.0), 6) for _ in range(20)}) > 1
    assert timedelta(seconds=retry_delay(1, 5.0)) < timedelta(seconds=7)


_ = WebhookDeliverer  # (the deliverer under test runs in the API state's side tasks)


async def test_processes_taking_at_once_never_take_one_delivery_twice(state: AppState, account: str) -> None:
    async with state.engine.begin() as conn:
        endpoint_id, _ = await webhooks_db.add_endpoint(
            conn, account, "http://127.0.0.1:9/closed", webhooks_db.EVENT_TYPES
        )
        await conn.execute(
            text(
                "INSERT INTO webhook_deliveries (id, endpoint_id, response_id, type, payload)"
                " SELECT 'evt_race_' || n, :e, 'resp_x', 'response.completed', '{}' FROM generate_series(1, 200) n"
            ),
            {"e": endpoint_id},
        )

    async def take() -> list[str]:
        async with state.engine.begin() as conn:
            return [due.id for due in (await webhooks_db.record_and_take(conn, [], 20, 100, {}, lease_seconds=60)).due]

    taken = [due_id for batch in await asyncio.gather(*(take() for _ in range(16))) for due_id in batch]
    assert len(taken) == len(set(taken)) and taken


async def due_deliveries(conn: Any, endpoint_id: str, count: int) -> None:
    await conn.execute(
        text(
            "INSERT INTO webhook_deliveries (id, endpoint_id, response_id, type, payload)"
            " SELECT 'evt_' || md5(random()::text), :e, 'resp_x', 'response.completed', '{}'"
            " FROM generate_series(1, :n)"
        ),
        {"e": endpoint_id, "n": count},
    )


async def test_a_take_gives_each_endpoint_at_most_its_room(state: AppState, account: str) -> None:
    async with state.engine.begin() as conn:  # (uncommitted: no deliverer sees these)
        full, limited, free = [
            (await webhooks_db.add_endpoint(conn, account, f"http://127.0.0.1:9/{n}", webhooks_db.EVENT_TYPES))[0]
            for n in range(3)
        ]
        for endpoint_id in (full, limited, free):
            await due_deliveries(conn, endpoint_id, 10)
        taken = await webhooks_db.record_and_take(conn, [], 100, 4, {full: 0, limited: 1}, lease_seconds=60)
        await conn.rollback()
    by_endpoint = [due.endpoint_id for due in taken.due]
    assert (by_endpoint.count(full), by_endpoint.count(limited), by_endpoint.count(free)) == (0, 1, 4)
    assert taken.seconds_until_due is not None and taken.seconds_until_due <= 0  # the limited one has more due


async def test_outcomes_are_recorded_in_the_statement_that_takes_the_next(state: AppState, account: str) -> None:
    async with state.engine.begin() as conn:
        endpoint_id, _ = await webhooks_db.add_endpoint(conn, account, "http://127.0.0.1:9/", webhooks_db.EVENT_TYPES)
        await due_deliveries(conn, endpoint_id, 3)
        first = await webhooks_db.record_and_take(conn, [], 3, 3, {}, lease_seconds=60)
        delivered, retried, given_up = (due.id for due in first.due)
        outcomes = [
            webhooks_db.Attempted(delivered, True, 204, None, None),
            webhooks_db.Attempted(retried, False, 503, "answered HTTP 503", 30.0),
            webhooks_db.Attempted(given_up, False, None, "ConnectionRefused", None),
        ]
        later = await webhooks_db.record_and_take(conn, outcomes, 3, 3, {}, lease_seconds=60)
        rows = {
            row.id: row
            for row in await conn.execute(
                select(webhook_deliveries).where(webhook_deliveries.c.endpoint_id == endpoint_id)
            )
        }
        now = await conn.scalar(text("SELECT now()"))
        await conn.rollback()
    assert later.due == [] and later.seconds_until_due == 30.0  # the retry is the next due
    assert rows[delivered].delivered_at is not None and rows[delivered].last_status == 204
    assert rows[retried].next_attempt_at == now + timedelta(seconds=30) and rows[retried].last_error
    assert rows[retried].delivered_at is None and rows[retried].failed_at is None
    assert rows[given_up].failed_at is not None and rows[given_up].last_error == "ConnectionRefused"


async def test_a_late_outcome_leaves_a_delivery_another_process_ended_as_it_was_left(
    state: AppState, account: str
) -> None:
    """A process whose lease lapsed (stalled, or giving back at its stop) has its word recorded
    after another process delivered or gave up the delivery: it must not make it due again."""
    async with state.engine.begin() as conn:  # (uncommitted: no deliverer sees these)
        endpoint_id, _ = await webhooks_db.add_endpoint(conn, account, "http://127.0.0.1:9/", webhooks_db.EVENT_TYPES)
        await due_deliveries(conn, endpoint_id, 2)
        taken = await webhooks_db.record_and_take(conn, [], 1000, 1000, {}, lease_seconds=60)
        delivered, given_up = (due.id for due in taken.due if due.endpoint_id == endpoint_id)
        ended_elsewhere = [
            webhooks_db.Attempted(delivered, True, 200, None, None),
            webhooks_db.Attempted(given_up, False, None, "ConnectionRefused", None),
        ]
        await webhooks_db.record_and_take(conn, ended_elsewhere, 0, 1000, {}, lease_seconds=60)
        late = [webhooks_db.Attempted(one, False, None, INTERRUPTED, 0.0) for one in (delivered, given_up)]
        await webhooks_db.record_and_take(conn, late, 0, 1000, {}, lease_seconds=60)
        rows = {
            row.id: row
            for row in await conn.execute(
                select(webhook_deliveries).where(webhook_deliveries.c.endpoint_id == endpoint_id)
            )
        }
        await conn.rollback()
    assert rows[delivered].delivered_at is not None and rows[delivered].last_status == 200
    assert rows[delivered].last_error is None
    assert rows[given_up].failed_at is not None and rows[given_up].last_error == "ConnectionRefused"


async def test_a_healthy_endpoint_is_sent_many_deliveries_at_once(
    state: AppState, account: str, receiver: Receiver
) -> None:
    receiver.delay = 0.3
    async with state.engine.begin() as conn:
        endpoint_id, _ = await webhooks_db.add_endpoint(conn, account, receiver.url, webhooks_db.EVENT_TYPES)
        await due_deliveries(conn, endpoint_id, 2 * PER_ENDPOINT)
    state.webhooks.nudge()
    received = await receiver.arrival(2 * PER_ENDPOINT)
    assert len({hook.headers["webhook-id"] for hook in received}) == 2 * PER_ENDPOINT
    assert max(hook.concurrent for hook in received) >= PER_ENDPOINT


async def test_an_endpoint_that_fails_is_sent_at_most_two_at_once_until_it_answers(
    state: AppState, account: str, receiver: Receiver
) -> None:
    receiver.delay, receiver.statuses = 0.1, [500] * PER_ENDPOINT * 2
    async with state.engine.begin() as conn:
        endpoint_id, _ = await webhooks_db.add_endpoint(conn, account, receiver.url, webhooks_db.EVENT_TYPES)
        await due_deliveries(conn, endpoint_id, PER_ENDPOINT)
    state.webhooks.nudge()
    received = await receiver.arrival(PER_ENDPOINT * 2 + PER_ENDPOINT, timeout=30)
    # The first attempts went out at once; once they failed, a process sends two at a time (this
    # one, and the e2e session's API and worker when the whole suite runs).
    assert max(hook.concurrent for hook in received[:PER_ENDPOINT]) > 2
    retries = received[PER_ENDPOINT : PER_ENDPOINT * 2]
    assert max(hook.concurrent for hook in retries) <= PER_FAILING_ENDPOINT * 3


async def test_an_https_endpoint_is_reached_at_the_checked_address_and_its_certificate_checked(
    state: AppState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the address the guard checked; the certificate is checked against
    the URL's host name and the trust store (which SSL_CERT_FILE extends)."""
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(server_context)
    arrived: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            arrived.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
        writer.close()

    listening = await asyncio.start_server(handle, "localhost", 0, ssl=server_context)
    port = listening.sockets[0].getsockname()[1]
    due = webhooks_db.Due(
        "evt_tls", "we_tls", f"https://localhost:{port}/hook", "{}", ["whsec_" + "A" * 44], 1, datetime.now(UTC)
    )
    # (the guard resolves localhost, and the connection goes to the address it allowed)
    settings = state.settings.model_copy(update={"webhook_allow": "127.0.0.1/32,::1/128"})
    with tempfile.TemporaryDirectory() as directory:
        trusted = Path(directory) / "ca.pem"
        authority.cert_pem.write_to_path(str(trusted))
        untrusting = WebhookDeliverer(settings)
        status, error = await untrusting._send(due)
        assert status is None and error is not None and "certificate" in error.lower()
        monkeypatch.setenv("SSL_CERT_FILE", str(trusted))
        trusting = WebhookDeliverer(settings)
        assert await trusting._send(due) == (204, None)
    assert arrived and f"host: localhost:{port}".encode() in arrived[-1].lower()
    for deliverer in (untrusting, trusting):
        await deliverer.close()
    listening.close()


async def test_a_response_is_announced_to_its_own_accounts_endpoints_only(
    state: AppState, account: str, open_worker: OpenWorker, fake: FakeRuntime, receiver: Receiver
) -> None:
    async with state.engine.begin() as conn:
        other = await accounts_db.ensure_account(conn, f"hooks-{secrets.token_hex(4)}")
    await endpoint(state, account, receiver.url)
    await ended_in_background(state, other, open_worker, input="hello")
    own = await ended_in_background(state, account, open_worker, input="hello")
    [received] = await receiver.arrival(1)
    await asyncio.sleep(0.5)  # (another's would have come by now)
    assert len(receiver.received) == 1 and json.loads(received.body)["data"]["id"] == own


async def test_the_deliverer_takes_and_records_while_every_connection_of_its_process_is_taken(
    environment: Environment,
) -> None:
    settings = environment.settings().model_copy(
        update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout": 0.5, "housekeeping_seconds": 3600.0}
    )
    small = await AppState.open(settings)
    try:
        async with small.engine.connect() as held:
            await held.execute(text("SELECT 1"))
            with pytest.raises(sqlalchemy.exc.TimeoutError):  # a request would wait, then get a 503
                async with small.engine.connect():
                    pass
            # The deliverer has a connection of its own: it neither waits for one nor takes one.
            taken = await within(small.webhooks._record_and_take([], 0), 5)
            assert taken.due == []
            await within(small.webhooks._report_oldest(), 5)
    finally:
        await small.close()


async def test_a_deliverer_cancelled_in_the_turn_it_is_woken_ends(state: AppState) -> None:
    """A process's shutdown waits for its deliverer to end: a cancellation that lands in the same
    turn of the loop as a wake-up (an attempt ending, a response ending) must still end it."""
    deliverer = WebhookDeliverer(state.settings)
    running = asyncio.create_task(deliverer.run())
    for _ in range(3):  # (several turns: it takes nothing, then waits to be woken)
        await asyncio.sleep(0.1)
    deliverer.nudge()
    running.cancel()
    try:
        async with asyncio.timeout(5):
            await asyncio.gather(running, return_exceptions=True)
        assert running.cancelled()
    finally:
        await deliverer.close()

"""In-process fixtures: the API's state and workers' state against a test database and Redis,
so a test can drive the job function and the repository directly.

These tests get a database and queue of their own: responses they leave queued on purpose would
otherwise be requeued by the end-to-end stacks' workers and run in the middle of another test."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import job_key_prefix
from arq.jobs import deserialize_job_raw
from sqlalchemy import text, update

from app.catalog import Catalog
from app.events.hub import EventHub
from app.protocol.encoding import WireEvent
from app.queue.jobs import job_deserializer, job_serializer
from app.service import creation, storing, validating
from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.tables import responses
from tests.conftest import Environment, new_environment
from workers.jobs.generate import generate
from workers.state import WorkerState


@pytest.fixture(scope="session")
def environment(tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str) -> Iterator[Environment]:
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        yield environment


HUB_IDLE = 0.4  # the hub fixture's idle period: a quiet follower is told after this long


@pytest.fixture
def hub_channel() -> str:
    """An events channel of the test's own: nothing another test publishes reaches it."""
    return f"responses:events:test-{secrets.token_hex(4)}"


@pytest.fixture
async def hub(state: AppState, hub_channel: str) -> AsyncIterator[EventHub]:
    """An event hub on `hub_channel` with no Postgres check of its own (followers read for themselves)."""
    hub = EventHub(state.redis, hub_channel, HUB_IDLE)
    await hub.start()
    yield hub
    await hub.close()


def wire_delta(number: int) -> WireEvent:
    """A numbered text delta as it travels (its text says its number)."""
    return WireEvent(number, "response.output_text.delta", f'{{"sequence_number":{number},"delta":"d{number}"}}')


@pytest.fixture(scope="session")
async def state(environment: Environment) -> AsyncIterator[AppState]:
    # Tests here run the reaper themselves, on leases they expire on purpose: none in the background.
    state = await AppState.open(environment.settings().model_copy(update={"housekeeping_seconds": 3600.0}))
    yield state
    await state.close()


@pytest.fixture(scope="session")
async def account_id(state: AppState) -> str:
    async with state.engine.begin() as conn:
        return await accounts_db.ensure_account(conn, f"integration-{secrets.token_hex(3)}")


OpenWorker = Callable[[], Awaitable[WorkerState]]


@pytest.fixture
async def open_worker(environment: Environment) -> AsyncIterator[OpenWorker]:
    """Opens as many independent workers (as if separate processes) as a test asks for."""
    opened: list[tuple[WorkerState, ArqRedis]] = []

    async def open_one() -> WorkerState:
        redis = await create_pool(
            RedisSettings.from_dsn(environment.redis_url),
            job_serializer=job_serializer,
            job_deserializer=job_deserializer,
        )
        settings = environment.settings()
        state = WorkerState.open(settings, redis, Catalog.load(settings.models_path))
        state.start()
        opened.append((state, redis))
        return state

    yield open_one
    for state, redis in opened:
        await state.close()
        await redis.aclose()


async def run_job(state: WorkerState, response_id: str) -> None:
    await generate({"state": state}, response_id)


async def accept(state: AppState, account_id: str, **body: object) -> str:
    accepted = await creation.accept(state, account_id, {"model": "fake", **body})
    return accepted.record.id


async def built(state: AppState, account_id: str, body: dict[str, Any]) -> responses_db.NewResponse:
    """The response a create of `body` makes, as its API or its worker would store it (not stored)."""
    create, model = await validating.validated(state, account_id, body)
    record = validating.new_record(create, model, account_id=account_id)
    return await storing.build(state, account_id, create, record)


async def in_progress(state: AppState, account_id: str, count: int, **columns: object) -> list[str]:
    """`count` responses as a worker running them leaves them (and with `columns` set)."""
    ids = [await accept(state, account_id, input="hi") for _ in range(count)]
    async with state.engine.begin() as conn:
        await conn.execute(update(responses).where(responses.c.id.in_(ids)).values(status="in_progress", **columns))
    return ids


async def events_of(state: AppState, response_id: str) -> list[dict[str, object]]:
    async with state.engine.connect() as conn:
        return [e.data() for e in await events_db.events_after(conn, response_id, -1, None)]


async def status_of(state: AppState, response_id: str) -> str:
    async with state.engine.connect() as conn:
        row = await responses_db.get_row(conn, response_id)
    assert row is not None
    return str(row.status)


async def orphaned(state: AppState, account_id: str, input: str = "orphan", **body: Any) -> str:
    """A response whose worker claimed it, began its log, and died: its lease has lapsed."""
    response_id = await accept(state, account_id, input=input, **body)
    async with state.engine.begin() as conn:
        assert await responses_db.claim(conn, response_id, "dead-worker", 30) is not None
        await events_db.append(conn, response_id, [{"type": "response.created"}, {"type": "response.in_progress"}])
        await conn.execute(
            update(responses).where(responses.c.id == response_id).values(lease_expires_at=responses_db.db_now(-1))
        )
    return response_id


async def job_args(state: AppState, response_id: str) -> tuple[Any, ...]:
    """The arguments of the job queued for this response."""
    stored = await state.redis.get(job_key_prefix + response_id)
    assert stored is not None
    _, args, _, _, _ = deserialize_job_raw(stored, deserializer=job_deserializer)
    return tuple(args)


@pytest.fixture
async def refused_inserts(state: AppState) -> Any:
    """Postgres refuses the insert of a response with these instructions (as it refuses data it
    cannot hold), in this test's database only, for this test only."""
    marker = f"refuse-{secrets.token_hex(4)}"
    function = f"refuse_{secrets.token_hex(4)}"
    async with state.engine.begin() as conn:
        await conn.execute(
            text(
                f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.instructions = '{marker}' THEN RAISE EXCEPTION 'refused by the test' "
                "USING ERRCODE = 'invalid_parameter_value'; END IF; "
                "RETURN NEW; END $$"
            )
        )
        await conn.execute(
            text(f"CREATE TRIGGER {function} BEFORE INSERT ON responses FOR EACH ROW EXECUTE FUNCTION {function}()")
        )
    yield marker
    async with state.engine.begin() as conn:
        await conn.execute(text(f"DROP TRIGGER {function} ON responses"))
        await conn.execute(text(f"DROP FUNCTION {function}()"))

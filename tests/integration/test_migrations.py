"""The migrations are the schema: `upgrade head` on an empty database matches app/db/tables.py,
and `downgrade base` removes everything it made."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import migrate
from app.db.tables import metadata
from app.settings import Settings
from tests.conftest import admin_sql


@pytest.fixture
def empty_database_url() -> Iterator[str]:
    name = f"rs_migration_{secrets.token_hex(4)}"
    admin_sql(f'CREATE DATABASE "{name}"')
    yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    admin_sql(f'DROP DATABASE "{name}" WITH (FORCE)')


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_server_default": True})
    return list(compare_metadata(context, metadata))


async def test_upgrade_head_matches_the_table_definitions(empty_database_url: str) -> None:
    settings = Settings(DATABASE_URL=empty_database_url)
    await _in_thread(migrate, settings)
    engine = create_async_engine(empty_database_url)
    async with engine.connect() as conn:
        assert await conn.run_sync(_differences) == []
        tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        assert tables == {"accounts", "api_keys", "responses", "items", "response_events", "alembic_version"}
        assert (await conn.execute(text("SELECT count(*) FROM response_overview"))).scalar() == 0
        comment = (await conn.execute(text("SELECT obj_description('responses'::regclass)"))).scalar()
        assert comment and "items and events hang off it" in comment
        # as tables.py asks: room for in-place updates of a streaming response's sequence counter
        options = (await conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'responses'"))).scalar()
        assert options == ["fillfactor=70"]
    await engine.dispose()


async def test_downgrade_base_removes_everything(empty_database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    import migrations

    settings = Settings(DATABASE_URL=empty_database_url)
    await _in_thread(migrate, settings)
    config = Config()
    config.set_main_option("script_location", migrations.__path__[0])
    config.set_main_option("sqlalchemy.url", empty_database_url)
    await _in_thread(command.downgrade, config, "base")
    engine = create_async_engine(empty_database_url)
    async with engine.connect() as conn:
        tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    await engine.dispose()
    assert tables == {"alembic_version"}


async def _in_thread(function: Callable[..., None], *args: object) -> None:
    # Alembic's env.py runs its own event loop, which cannot nest inside the test's.
    await asyncio.to_thread(function, *args)


async def test_settings_stored_before_0005_survive_the_change_to_json(empty_database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", migrations.__path__[0])
    config.set_main_option("sqlalchemy.url", empty_database_url)
    await _in_thread(command.upgrade, config, "0004")
    engine = create_async_engine(empty_database_url)
    settings = '{"text": {"format": {"type": "text"}}, "tools": [], "temperature": 0.5}'
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO accounts (id, name) VALUES ('acct_1', 'one')"))
        await conn.execute(
            text(
                "INSERT INTO responses (id, account_id, model, background, stream, settings) "
                "VALUES ('resp_1', 'acct_1', 'm', false, false, CAST(:settings AS jsonb))"
            ),
            {"settings": settings},
        )
    await _in_thread(command.upgrade, config, "head")
    async with engine.connect() as conn:
        kind = (await conn.execute(text("SELECT pg_typeof(settings)::text FROM responses"))).scalar()
        stored = await conn.execute(text("SELECT settings::jsonb = CAST(:s AS jsonb) FROM responses"), {"s": settings})
        assert kind == "json" and stored.scalar() is True
    await engine.dispose()

"""Alembic environment: runs migrations over asyncpg against DATABASE_URL (or the URL given in the config)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.settings import Settings
from app.storage.tables import described_here, metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection, target_metadata=metadata, compare_server_default=True, include_object=described_here
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_async_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


url = config.get_main_option("sqlalchemy.url") or Settings().database_url
asyncio.run(_run_async(url))

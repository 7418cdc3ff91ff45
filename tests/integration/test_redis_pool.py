"""The Redis pool lends a connection without polling its socket (app/queue/redis_servers.py
`_LendsUnpolled`), yet one the server closed, or one holding a reply nobody read, is opened anew
before its next command, as redis-py's own poll would have it. Also the parts of redis-py this
reads: a redis-py whose parser or stream changed fails here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis._parsers.hiredis import _AsyncHiredisParser
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from app.queue.redis_servers import client
from tests.conftest import REDIS_BASE_URL


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    made = client(f"{REDIS_BASE_URL}/0")
    yield made
    await made.aclose()


async def test_a_command_is_lent_a_connection_without_a_poll_of_its_socket(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    await redis.ping()
    polls: list[Connection] = []

    async def poll(connection: Connection) -> bool:
        polls.append(connection)
        return False

    monkeypatch.setattr(Connection, "can_read_destructive", poll)
    assert await redis.echo("lent") == b"lent"
    assert polls == []
    (connection,) = redis.connection_pool._available_connections
    assert isinstance(connection._parser, _AsyncHiredisParser)  # (what is looked at instead)
    assert isinstance(connection._reader, asyncio.StreamReader)


async def test_a_connection_the_server_closed_is_opened_anew_before_its_next_command(redis: Redis) -> None:
    own_id = await redis.client_id()
    async with Redis.from_url(f"{REDIS_BASE_URL}/0") as other:
        assert await other.client_kill_filter(_id=own_id) == 1
    await asyncio.sleep(0.1)  # (the loop reads the connection's end)
    assert await redis.echo("after") == b"after"  # (redis-py retries no command by itself)
    assert await redis.client_id() != own_id


async def test_a_connection_lent_with_a_reply_unread_is_opened_anew(redis: Redis) -> None:
    """Its next command must read its own reply, not the one left."""
    pool = redis.connection_pool
    connection = await pool.get_connection("PING")
    await connection.send_command("PING")  # (its reply never read)
    await asyncio.sleep(0.1)
    await pool.release(connection)
    assert await redis.echo("mine") == b"mine"

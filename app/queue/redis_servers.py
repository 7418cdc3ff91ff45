"""Where Redis is. `REDIS_URL` names one server (`redis://[:password@]host:port/db`) or the
Sentinels that watch a primary: `redis+sentinel://[:password@]host:port,host:port,…/service[/db]`.
With Sentinels, a client asks them for the primary of `service` when it connects, and asks again
once a connection to it fails: after a failover the next connection goes to the promoted replica.
Redis holds nothing Postgres cannot rebuild (design invariant 1), so what an asynchronous replica
had not received when it was promoted is enqueued again by the reaper, as after a restart."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from redis._parsers.hiredis import _AsyncHiredisParser
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_TIMEOUT_SECONDS = 0.5  # a Sentinel that does not answer is passed over for the next


class _LendsUnpolled:
    """redis-py's pool polls a connection's socket before lending it for a command
    (`ensure_connection`: `can_read_destructive`, a read with a timeout of 0), which costs every
    command two turns of the event loop: on a busy worker, a first token's publish waited behind
    the other responses' work for them. Here the pool looks without waiting: at what the stream and
    the parser already hold, and whether the server closed the connection (its end, which the loop
    reads as it comes). redis-py closes a connection on any error or cancellation mid-command, so
    a lent one holding a reply is not expected; one found so, or closed, is opened anew, as
    redis-py does. The parts of redis-py this reads: tests/integration/test_redis_pool.py."""

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        await connection.connect()  # type: ignore[no-untyped-call]
        if await _holds_anything(connection):
            await connection.disconnect()
            await connection.connect()  # type: ignore[no-untyped-call]


async def _holds_anything(connection: AbstractConnection) -> bool:
    parser, stream = connection._parser, connection._reader
    if not isinstance(parser, _AsyncHiredisParser) or stream is None or parser._reader is None:
        return bool(await connection.can_read_destructive())  # type: ignore[no-untyped-call]  # (redis-py's own poll)
    return stream.at_eof() or bool(stream._buffer) or bool(parser._reader.has_data())


class _Pool(_LendsUnpolled, ConnectionPool):
    pass


class _SentinelPool(_LendsUnpolled, SentinelConnectionPool):
    pass


def connection_pool(url: str, **connection: Any) -> ConnectionPool:
    """A pool of connections to the server `url` names (or to the primary its Sentinels name),
    opened when first used."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        return _Pool.from_url(url, **connection)
    hosts = parts.netloc.rpartition("@")[2]
    path = [part for part in parts.path.split("/") if part]
    if not hosts or not 1 <= len(path) <= 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"REDIS_URL: a Sentinel URL is {SENTINEL_SCHEME}://host:port,host:port/service[/db]: {url!r}")
    sentinels = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ValueError(f"REDIS_URL: a Sentinel is host:port, not {host!r}")
        sentinels.append((name, int(port)))
    timeouts = {"socket_timeout": SENTINEL_TIMEOUT_SECONDS, "socket_connect_timeout": SENTINEL_TIMEOUT_SECONDS}
    manager = Sentinel(sentinels, sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]
    password = unquote(parts.password) if parts.password else None
    db = int(path[1]) if len(path) == 2 else 0
    return _SentinelPool(path[0], manager, db=db, password=password, **connection)  # type: ignore[no-untyped-call]


def client(url: str) -> Redis:
    """A Redis client of its own, on a pool of its own."""
    return Redis(connection_pool=connection_pool(url))

"""REDIS_URL names one server or the Sentinels of a primary (app/queue/redis_servers.py)."""

from __future__ import annotations

import pytest
from redis.asyncio import ConnectionPool
from redis.asyncio.sentinel import SentinelConnectionPool

from app.queue.redis_servers import connection_pool


def test_a_redis_url_is_one_server() -> None:
    pool = connection_pool("redis://:secret@10.0.0.5:6380/2")
    assert isinstance(pool, ConnectionPool) and not isinstance(pool, SentinelConnectionPool)
    assert (pool.connection_kwargs["host"], pool.connection_kwargs["port"]) == ("10.0.0.5", 6380)
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (2, "secret")


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    pool = connection_pool("redis+sentinel://:p%40ss@10.0.0.1:26379,sentinel-2:26380/mymaster/3")
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    assert [
        (c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
        for c in pool.sentinel_manager.sentinels
    ] == [("10.0.0.1", 26379), ("sentinel-2", 26380)]
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (3, "p@ss")


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://10.0.0.1:26379",  # no service
        "redis+sentinel:///mymaster",  # no Sentinel
        "redis+sentinel://10.0.0.1/mymaster",  # no port
        "redis+sentinel://10.0.0.1:x/mymaster",
        "redis+sentinel://10.0.0.1:26379/mymaster/zero",
        "redis+sentinel://10.0.0.1:26379/mymaster/0/more",
    ],
)
def test_a_malformed_sentinel_url_is_refused_saying_its_form(url: str) -> None:
    with pytest.raises(ValueError, match="REDIS_URL"):
        connection_pool(url)

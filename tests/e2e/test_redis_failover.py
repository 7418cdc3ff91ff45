"""Redis Sentinel: a primary, a replica and three Sentinels on loopback, the server pointed at the
Sentinels (`REDIS_URL=redis+sentinel://…/service`). The primary is killed in the middle of
streams (background, stored foreground and store=false ones); the Sentinels promote the
replica; the streams end whole and the queue goes on, on the new primary (Redis holds nothing
that cannot be rebuilt from Postgres: design invariant 1)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Environment, FakeRuntime, free_port, wait_until
from tests.e2e.processes import Stack, Streams

SERVICE = "responses-primary"


class SentinelRedis:
    """A primary, a replica of it and three Sentinels that watch it (quorum 2, the primary taken
    for down after a second without an answer)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.primary_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.url = "redis+sentinel://" + ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports) + f"/{SERVICE}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        server = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._run("primary", *server, "--port", str(self.primary_port))
        self._run(
            "replica", *server, "--port", str(self.replica_port), "--replicaof", "127.0.0.1", str(self.primary_port)
        )
        wait_until(lambda: self._info(self.replica_port).get("master_link_status") == "up", timeout=10)
        for n, port in enumerate(self.sentinel_ports):
            config = self.directory / f"sentinel-{n}.conf"  # (a Sentinel rewrites its file)
            config.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
            )
            self._run(f"sentinel-{n}", "redis-server", str(config), "--sentinel")
        wait_until(lambda: all(self._sees_replica(port) for port in self.sentinel_ports), timeout=15)

    def primary(self) -> int:
        """The primary's port, as the first Sentinel that answers says."""
        for port in self.sentinel_ports:
            try:
                sentinel = redis.Redis(port=port, socket_timeout=0.5)
                _, primary = sentinel.sentinel_get_master_addr_by_name(SERVICE)  # type: ignore[no-untyped-call]
                return int(primary)
            except redis.RedisError:
                continue
        raise AssertionError("no Sentinel answers")

    def kill_primary(self) -> None:
        self.processes["primary"].kill()
        self.processes["primary"].wait(10)

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(10)

    def _run(self, name: str, *command: str) -> None:
        self.processes[name] = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=self.directory)

    def _info(self, port: int) -> dict[str, Any]:
        try:
            info: dict[str, Any] = redis.Redis(port=port, socket_timeout=0.5).info("replication")  # type: ignore[assignment]
            return info
        except redis.RedisError:
            return {}

    def _sees_replica(self, port: int) -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=0.5).sentinel_slaves(SERVICE))  # type: ignore[no-untyped-call]
        except redis.RedisError:
            return False


@pytest.fixture
def sentinel_redis(tmp_path: Path) -> Iterator[SentinelRedis]:
    servers = SentinelRedis(tmp_path)
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


def test_streams_and_the_queue_go_on_when_the_redis_primary_fails_over(
    environment: Environment, fake: FakeRuntime, sentinel_redis: SentinelRedis
) -> None:
    texts = [" ".join(f"s{n}w{i}" for i in range(55)) for n in range(6)]  # 6.6 s each (the fake model's cap: 64)
    modes = [{"background": True}, {"background": False}, {"store": False}]  # two streams of each
    requests = [
        {"model": "fake", "input": "#fake " + json.dumps({"text": text, "delay": 0.12}), **modes[n % 3]}
        for n, text in enumerate(texts)
    ]
    with Stack(environment, REDIS_URL=sentinel_redis.url) as stack:
        worker = stack.start_worker()
        assert stack.client.responses.create(model="fake", input="warm up").status == "completed"
        streams = Streams(stack.client, requests)
        wait_until(lambda: all(sum(e.type == "response.output_text.delta" for e in r) >= 5 for r in streams.received))
        sentinel_redis.kill_primary()
        wait_until(lambda: sentinel_redis.primary() == sentinel_redis.replica_port, timeout=20)
        assert not any(r[-1].type == "response.completed" for r in streams.received)  # promoted mid-stream
        streams.wait(60)
        streams.assert_whole(texts)
        after = stack.client.responses.create(model="fake", input="after the failover", background=True)
        wait_until(lambda: stack.client.responses.retrieve(after.id).status == "completed", timeout=30)
        assert worker.poll() is None and stack.api.poll() is None
        queued = redis.Redis(port=sentinel_redis.replica_port).zcard(stack.env["RESPONSES_QUEUE"])
        assert queued == 0  # nothing left waiting on the new primary

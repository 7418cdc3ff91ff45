"""Real processes for the fault tests: a stack of one API and any number of workers on a queue
of its own, and a Redis server of a test's own that it can kill and start again."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai
import redis

from tests.conftest import (
    ROOT,
    Environment,
    create_key,
    free_port,
    start_api,
    start_logged,
    start_worker,
    wait_for_http,
    wait_until,
)

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(200)), "delay": 0.05})
FAST_HOUSEKEEPING = {
    "RESPONSES_LEASE_SECONDS": "2",
    "RESPONSES_HOUSEKEEPING_SECONDS": "0.5",
    "RESPONSES_REQUEUE_AFTER_SECONDS": "1",
}


class Stack:
    """One API and any number of workers, sharing a queue no other test reads."""

    def __init__(self, environment: Environment, *, api_log: Path | None = None, **env: str) -> None:
        """`api_log`: the file the API's output goes to (the terminal's otherwise)."""
        self.environment = environment
        self.env = {"RESPONSES_QUEUE": f"responses:crash:{secrets.token_hex(4)}", **FAST_HOUSEKEEPING, **env}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.port = free_port()
        self.api = self.start_api(api_log)
        self.client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1",
            api_key=create_key(environment, "crashes"),
            max_retries=0,
            timeout=30,
        )

    def start_api(self, log_to: Path | None = None) -> subprocess.Popen[bytes]:
        if log_to is None:
            process = start_api(self.environment, self.port, **self.env)
            self.processes.append(process)
            return process
        env = {"RESPONSES_FOLLOW_IDLE_SECONDS": "1", **self.env}  # (as start_api's)
        process = start_logged(self.environment, log_to, "api", "--port", str(self.port), **env)
        self.processes.append(process)
        wait_for_http(f"http://127.0.0.1:{self.port}/ready", process)
        return process

    def start_worker(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        process = start_worker(self.environment, *args, **{**self.env, **env})
        self.processes.append(process)
        return process

    def jobs_left(self, response_id: str) -> list[str]:
        """What Redis still holds of the response's jobs: its queue entries and arq's keys."""
        client = redis.Redis.from_url(self.environment.redis_url)
        try:
            queued = [job.decode() for job in client.zrange(self.env["RESPONSES_QUEUE"], 0, -1)]
            keys = [key.decode() for key in client.scan_iter(match=f"arq:*{response_id}*")]
        finally:
            client.close()
        return [f"queue entry {job}" for job in queued if job.startswith(response_id)] + sorted(keys)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


def stand_in_vllm(folder: Path) -> Path:
    """A folder holding a `vllm` for PATH: tests/stand_in_vllm.py, serving the fake runtime's
    contract as `vllm serve` would serve the model."""
    bin_dir = folder / "vllm-bin"
    bin_dir.mkdir()
    vllm = bin_dir / "vllm"
    vllm.write_text(f'#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m tests.stand_in_vllm "$@"\n')
    vllm.chmod(0o755)
    return bin_dir


class PrivateRedis:
    """A Redis server of the test's own (the shared one is never stopped or flushed), started
    again on the same port, empty, after each kill."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._servers: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        server = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        self._servers.append(server)
        wait_until(self.answers, timeout=10)

    def kill(self) -> None:
        server = self._servers[-1]
        server.kill()
        server.wait(10)

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.2).ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        for server in self._servers:
            if server.poll() is None:
                server.kill()
            server.wait(10)


def read_until_deltas(stream: openai.Stream[Any], count: int) -> list[Any]:
    seen = []
    for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta" and sum(e.type == event.type for e in seen) >= count:
            break
    stream.close()
    return seen


class Streams:
    """Streamed creates (`requests`: their parameters), each read to its end by a thread of its own."""

    def __init__(self, client: openai.OpenAI, requests: list[dict[str, Any]]) -> None:
        self.received: list[list[Any]] = [[] for _ in requests]
        self.failures: list[BaseException] = []
        self._readers = [
            threading.Thread(target=self._read, args=(client, request, index)) for index, request in enumerate(requests)
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, client: openai.OpenAI, request: dict[str, Any], index: int) -> None:
        try:
            for event in client.responses.create(**request, stream=True):
                self.received[index].append(event)
        except BaseException as exc:
            self.failures.append(exc)

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        assert not any(reader.is_alive() for reader in self._readers), "streams still open"

    def assert_whole(self, texts: list[str]) -> None:
        """Each stream ended completed with its text, its events numbered once each, in order."""
        assert not self.failures, self.failures[:3]
        for text, events in zip(texts, self.received, strict=True):
            assert [e.sequence_number for e in events] == list(range(len(events)))
            assert events[-1].type == "response.completed" and events[-1].response.output_text == text
            assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
            assert not [e for e in events if e.type == "error"]

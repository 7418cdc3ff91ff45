"""A generation survives its worker: killed, shut down or lost, its worker's running generation is
continued by another worker from its last committed event, and a client following the stream
sees one unbroken answer. Real processes, as the other crash tests run them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from redis import Redis

from app.queue.redis_keys import WORKER_PREFIX
from tests.conftest import Environment, FakeRuntime, answers_200, free_port, new_environment, wait_until
from tests.e2e.processes import Stack


@pytest.fixture
def environment(database_of_its_own: Environment) -> Environment:
    """(Its workers are killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return database_of_its_own


WORDS = [f"w{i}" for i in range(80)]
SCRIPT = "#fake " + json.dumps({"text": " ".join(WORDS), "delay": 0.05})  # 4 s
FULL_TEXT = " ".join(WORDS)


class Follower:
    """Follows a background stream from its start, in a thread, until it ends."""

    def __init__(self, client: openai.OpenAI, model: str, script: str = SCRIPT) -> None:
        self.events: list[Any] = []
        self.created = threading.Event()
        self._thread = threading.Thread(target=self._follow, args=(client, model, script))
        self._thread.start()

    def _follow(self, client: openai.OpenAI, model: str, script: str) -> None:
        for event in client.responses.create(model=model, input=script, background=True, stream=True):
            self.events.append(event)
            self.created.set()

    @property
    def response_id(self) -> str:
        self.created.wait(10)
        return str(self.events[0].response.id)

    def deltas(self) -> int:
        return sum(e.type == "response.output_text.delta" for e in self.events)

    def join(self) -> None:
        self._thread.join(60)

    @property
    def text(self) -> str:
        return "".join(e.delta for e in self.events if e.type == "response.output_text.delta")


def two_workers(stack: Stack, environment: Environment) -> list[subprocess.Popen[bytes]]:
    """Two workers, returned once both have announced themselves (their heartbeats): a worker
    leaving hands over only to one it knows is alive."""
    workers = [stack.start_worker(), stack.start_worker()]
    redis = Redis.from_url(environment.redis_url)

    def beating() -> set[str]:
        """The worker ids beating now (of any deployment on this Redis)."""
        beats: list[Any] = [redis.get(key) for key in redis.scan_iter(match=WORKER_PREFIX + "*")]
        return {str(json.loads(beat)["worker_id"]) for beat in beats if beat}

    try:
        wait_until(lambda: {f"{socket.gethostname()}:{w.pid}" for w in workers} <= beating())
    finally:
        redis.close()
    return workers


def running_worker(environment: Environment, response_id: str, workers: list[subprocess.Popen[bytes]]) -> Any:
    """The worker process generating the response."""
    [row] = environment.query("SELECT worker_id FROM responses WHERE id = $1", response_id)
    pid = int(row["worker_id"].rsplit(":", 1)[1])
    [worker] = [w for w in workers if w.pid == pid]
    return worker


def assert_one_unbroken_answer(follower: Follower, fake: FakeRuntime) -> None:
    numbers = [e.sequence_number for e in follower.events]
    assert numbers == list(range(len(numbers)))  # no gap, no duplicate, across the handover
    assert follower.events[-1].type == "response.completed"
    assert follower.text == FULL_TEXT == follower.events[-1].response.output_text
    [first, continuation] = fake.requests()  # exactly one continuation request
    assert first["messages"][-1]["role"] == "user"
    last = continuation["messages"][-1]
    assert last["role"] == "assistant" and last["content"] and FULL_TEXT.startswith(last["content"])
    assert continuation["messages"][:-1] == first["messages"]  # the same request, then the answer so far


def killed_mid_answer(stack: Stack, environment: Environment, fake: FakeRuntime, model: str) -> Follower:
    """A follower of a response whose worker was killed mid-answer, with a second worker alive,
    followed to its end: one unbroken answer."""
    workers = two_workers(stack, environment)
    follower = Follower(stack.client, model)
    wait_until(lambda: follower.deltas() >= 10)
    running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
    follower.join()
    assert_one_unbroken_answer(follower, fake)
    return follower


def test_a_killed_workers_generation_is_continued_by_another(environment: Environment, fake: FakeRuntime) -> None:
    with Stack(environment) as stack:
        follower = killed_mid_answer(stack, environment, fake, "continuing-model")
        continuation = fake.requests()[1]
        assert continuation["continue_final_message"] is True and continuation["add_generation_prompt"] is False
        [row] = environment.query(
            "SELECT continuations, started_at, continued_at, completed_at FROM responses WHERE id = $1",
            follower.response_id,
        )
        assert row["continuations"] == 1
        assert row["started_at"] < row["continued_at"] < row["completed_at"]  # (the console's timeline marks it)
        # Neither the dead worker's job nor the continuation's is left in Redis.
        wait_until(lambda: stack.jobs_left(follower.response_id) == [])


def test_a_model_that_continues_a_trailing_assistant_message_itself_is_sent_it_alone(
    environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(environment) as stack:
        killed_mid_answer(stack, environment, fake, "prefill-model")
        assert "continue_final_message" not in fake.requests()[1]


def test_a_worker_shut_down_hands_its_generation_over_at_once(environment: Environment, fake: FakeRuntime) -> None:
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="30") as stack:
        workers = two_workers(stack, environment)
        follower = Follower(stack.client, "continuing-model")
        wait_until(lambda: follower.deltas() >= 10)
        leaving = running_worker(environment, follower.response_id, workers)
        leaving.send_signal(signal.SIGTERM)
        started = time.monotonic()
        leaving.wait(20)
        assert time.monotonic() - started < 10  # not the 30 s grace: another worker took it over
        follower.join()
        assert_one_unbroken_answer(follower, fake)


def test_a_worker_shut_down_with_no_other_alive_finishes_within_its_grace_and_says_draining(
    environment: Environment, fake: FakeRuntime
) -> None:
    port = free_port()
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="10") as stack:
        worker = stack.start_worker(RESPONSES_WORKER_PORT=str(port))
        ready = f"http://127.0.0.1:{port}/ready"
        wait_until(lambda: answers_200(ready))
        follower = Follower(stack.client, "continuing-model")
        wait_until(lambda: follower.deltas() >= 10)
        worker.send_signal(signal.SIGTERM)
        wait_until(lambda: httpx.get(ready).json() == {"status": "draining"}, timeout=5)
        follower.join()
        assert follower.events[-1].type == "response.completed" and follower.text == FULL_TEXT
        assert len(fake.requests()) == 1  # finished where it began
        worker.wait(15)


def test_past_its_grace_with_no_other_alive_a_generation_waits_for_the_next_worker(
    environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="1") as stack:
        worker = stack.start_worker()
        follower = Follower(stack.client, "continuing-model")
        wait_until(lambda: follower.deltas() >= 10)
        worker.send_signal(signal.SIGTERM)
        worker.wait(15)
        time.sleep(3)  # past the lease: still running, waiting for a worker, not failed
        response = stack.client.responses.retrieve(follower.response_id)
        assert response.status == "in_progress" and follower.events[-1].type != "response.failed"
        stack.start_worker()
        follower.join()
        assert_one_unbroken_answer(follower, fake)


def test_a_generation_is_continued_at_most_the_configured_number_of_times(
    tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str, fake: FakeRuntime
) -> None:
    # A database of its own: the limit is each process's setting, and the session's processes
    # (another limit) would reap this response too.
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        _continued_at_most_once(environment, fake)


def _continued_at_most_once(environment: Environment, fake: FakeRuntime) -> None:
    script = "#fake " + json.dumps({"text": " ".join(WORDS), "delay": 0.1})  # 8 s
    with Stack(environment, RESPONSES_MAX_CONTINUATIONS="1") as stack:
        workers = two_workers(stack, environment)
        follower = Follower(stack.client, "continuing-model", script)
        wait_until(lambda: follower.deltas() >= 5)
        running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
        wait_until(lambda: len(fake.requests()) == 2 and follower.deltas() >= 25)  # continued once
        running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
        follower.join()
        assert follower.events[-1].type == "response.failed"  # not a second time
        numbers = [e.sequence_number for e in follower.events]
        assert numbers == list(range(len(numbers)))
        failed = stack.client.responses.retrieve(follower.response_id)
        assert failed.status == "failed" and failed.output_text == follower.text != ""
        assert len(fake.requests()) == 2

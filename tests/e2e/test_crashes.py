"""Crashes with real processes: a response, once accepted, is never lost, never run twice, and
every follower sees it end. Each test runs its own API and workers on a private queue."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.conftest import Environment, FakeRuntime, answers_200, wait_until
from tests.e2e.conftest import Restart
from tests.e2e.processes import SLOW, PrivateRedis, Stack, read_until_deltas

WEB_SEARCH_OFF = "off: RESPONSES_WEB_SEARCH_URL is not set, so web_search tools are echoed and not offered to the model"


@pytest.fixture
def environment(database_of_its_own: Environment) -> Environment:
    """(Its workers are killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return database_of_its_own


@pytest.fixture
def stack(environment: Environment) -> Iterator[Stack]:
    stack = Stack(environment)
    yield stack
    stack.close()


def test_worker_killed_mid_generation_fails_the_response_for_every_follower(stack: Stack, fake: FakeRuntime) -> None:
    worker = stack.start_worker()
    created = stack.client.responses.create(model="fake", input=SLOW, background=True, stream=True)
    seen = []
    for event in created:
        seen.append(event)
        if event.type == "response.output_text.delta" and len(seen) > 8:
            break
    created.close()
    response_id = seen[0].response.id
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    stack.start_worker()  # its housekeeping finds the expired lease
    follower = list(stack.client.responses.retrieve(response_id, stream=True, starting_after=len(seen) - 1))
    numbers = [e.sequence_number for e in seen + follower]
    assert numbers == list(range(len(numbers)))  # no gap, no duplicate, across the crash
    assert follower[-1].type == "response.failed"
    failed = stack.client.responses.retrieve(response_id)
    assert failed.status == "failed" and failed.error is not None
    assert "stopped responding" in failed.error.message
    time.sleep(1.5)  # a requeue or redelivery would show up as a second runtime request
    assert len(fake.requests()) == 1  # never re-run
    assert stack.client.responses.retrieve(response_id).status == "failed"
    assert stack.jobs_left(response_id) == []  # the dead worker's job went with its response


def test_a_killed_workers_store_false_job_leaves_nothing_in_the_queue(stack: Stack, fake: FakeRuntime) -> None:
    """No one can continue it (its request lived only in the job): once the worker's heartbeat
    is gone, its job goes from the queue, which then lists only work that waits. Its follower
    was told the generation is lost."""
    worker = stack.start_worker()
    stream = stack.client.responses.create(model="fake", input=SLOW, store=False, stream=True)
    seen = []
    with pytest.raises(openai.APIError) as lost:
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta" and len(seen) == 5:
                worker.send_signal(signal.SIGKILL)
                worker.wait(10)
    assert "worker" in lost.value.message
    response_id = seen[0].response.id
    assert stack.jobs_left(response_id) != []  # (the job timeout, hours, would have kept them)
    stack.start_worker()  # its housekeeping sees the dead worker's heartbeat expire (15 s here)
    wait_until(lambda: stack.jobs_left(response_id) == [], timeout=40)
    assert len(fake.requests()) == 1  # and it was not run again


def test_with_no_worker_left_a_lost_generation_still_ends_and_keeps_its_output(stack: Stack, fake: FakeRuntime) -> None:
    worker = stack.start_worker()
    created = stack.client.responses.create(model="fake", input=SLOW, background=True, stream=True)
    seen = read_until_deltas(created, 5)
    response_id = seen[0].response.id
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    # No worker of the model is started again: the API notices the expired lease.
    follower = list(stack.client.responses.retrieve(response_id, stream=True, starting_after=len(seen) - 1))
    numbers = [e.sequence_number for e in seen + follower]
    assert numbers == list(range(len(numbers)))
    assert follower[-1].type == "response.failed"
    failed = stack.client.responses.retrieve(response_id)
    assert failed.status == "failed" and failed.error is not None and "stopped responding" in failed.error.message
    # What followers could read is kept, in the terminal event and in the stored response.
    streamed = "".join(e.delta for e in seen + follower if e.type == "response.output_text.delta")
    assert streamed.startswith("w0 w1 w2") and failed.output_text == streamed
    assert follower[-1].response.output_text == streamed
    assert [item.status for item in failed.output] == ["incomplete"]


def test_a_worker_stopped_past_its_lease_stops_reading_the_runtime_when_it_resumes(
    stack: Stack, fake: FakeRuntime
) -> None:
    worker = stack.start_worker()
    long_script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(400)), "delay": 0.05})  # 20 s
    created = stack.client.responses.create(model="fake", input=long_script, background=True, stream=True)
    response_id = read_until_deltas(created, 3)[0].response.id
    worker.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: stack.client.responses.retrieve(response_id).status == "failed", timeout=10)
    finally:
        worker.send_signal(signal.SIGCONT)
    # At once, not after reading the model's answer to its end for nobody.
    wait_until(lambda: fake.stats()["streams_aborted"] == 1, timeout=5)
    assert fake.stats()["streams_finished"] == 0
    failed = stack.client.responses.retrieve(response_id)
    assert failed.status == "failed" and "stopped responding" in failed.error.message
    assert stack.client.responses.create(model="fake", input="still working").status == "completed"


def test_api_restart_mid_stream_resumes_every_remaining_event_once(stack: Stack, fake: FakeRuntime) -> None:
    stack.start_worker()
    script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(40)), "delay": 0.03})
    created = stack.client.responses.create(
        model="fake", input=script, background=True, stream=True, stream_options={"include_obfuscation": False}
    )
    seen = []
    for event in created:
        seen.append(event)
        if len(seen) == 6:
            break
    stack.api.kill()
    stack.api.wait(10)
    stack.api = stack.start_api()  # same port, new process
    resumed = list(stack.client.responses.retrieve(seen[0].response.id, stream=True, starting_after=5))
    numbers = [e.sequence_number for e in seen + resumed]
    assert numbers == list(range(len(numbers)))
    assert resumed[-1].type == "response.completed"
    text = "".join(e.delta for e in seen + resumed if e.type == "response.output_text.delta")
    assert text == " ".join(f"w{i}" for i in range(40)) == resumed[-1].response.output_text


def test_queued_jobs_that_redis_lost_are_requeued_and_complete(
    stack: Stack, fake: FakeRuntime, environment: Environment
) -> None:
    created = [stack.client.responses.create(model="fake", input=f"lost {i}", background=True) for i in range(3)]
    connection = redis.Redis.from_url(environment.redis_url)
    queue = stack.env["RESPONSES_QUEUE"]
    assert connection.zcard(queue) == 3
    connection.delete(queue, *(f"arq:job:{r.id}" for r in created))  # Redis forgets them
    stack.start_worker()
    for response in created:
        wait_until(lambda r=response: stack.client.responses.retrieve(r.id).status == "completed")  # type: ignore[misc]
    assert sorted(r["messages"][-1]["content"] for r in fake.requests()) == ["lost 0", "lost 1", "lost 2"]


def test_graceful_shutdown_fails_running_generations_and_leaves_queued_ones(stack: Stack, fake: FakeRuntime) -> None:
    worker = stack.start_worker()
    running = stack.client.responses.create(model="fake", input=SLOW, background=True)
    wait_until(lambda: stack.client.responses.retrieve(running.id).status == "in_progress")
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: worker.poll() is not None, timeout=15)
    ended = stack.client.responses.retrieve(running.id)
    assert ended.status == "failed" and ended.error is not None
    assert "shut down" in ended.error.message
    queued = stack.client.responses.create(model="fake", input="after shutdown", background=True)
    time.sleep(0.5)
    assert stack.client.responses.retrieve(queued.id).status == "queued"  # no worker: it waits
    stack.start_worker()
    wait_until(lambda: stack.client.responses.retrieve(queued.id).status == "completed")
    assert stack.client.responses.retrieve(running.id).status == "failed"  # and is not re-run


def test_redis_flushed_while_responses_are_queued(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    with Stack(environment, REDIS_URL=private_redis.url) as stack:
        created = [stack.client.responses.create(model="fake", input=f"flushed {i}", background=True) for i in range(3)]
        redis.Redis(port=private_redis.port).flushall()  # everything Redis knew is gone
        stack.start_worker()
        for response in created:
            wait_until(lambda r=response: stack.client.responses.retrieve(r.id).status == "completed")  # type: ignore[misc]


def test_redis_down_means_fast_503s_and_nothing_accepted_is_lost(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    with Stack(environment, REDIS_URL=private_redis.url) as stack:
        accepted = stack.client.responses.create(model="fake", input="before the outage", background=True)
        root = f"http://127.0.0.1:{stack.port}"
        assert httpx.get(f"{root}/ready").json() == {
            "status": "ok",
            "postgres": "ok",
            "redis": "ok",
            "vector_stores": "unavailable: PostgreSQL has no pgvector extension",  # (the machine's has none)
            "web_search": WEB_SEARCH_OFF,
        }
        private_redis.kill()
        # Out of the load balancer's rotation, but alive: a process manager must not restart it.
        unready = httpx.get(f"{root}/ready")
        assert unready.status_code == 503 and unready.json()["redis"].startswith("unavailable")
        assert httpx.get(f"{root}/health").status_code == 200
        for kwargs in ({"background": True}, {"stream": True}, {}):
            started = time.monotonic()
            with pytest.raises(openai.InternalServerError) as caught:
                stack.client.responses.create(model="fake", input="during the outage", **kwargs)  # type: ignore[call-overload]
            assert caught.value.status_code == 503 and caught.value.response.headers["retry-after"] == "1"
            assert time.monotonic() - started < 6
        refused = environment.query("SELECT 1 FROM items WHERE payload::text LIKE '%during the outage%'")
        assert refused == []  # a refused create leaves nothing behind
        private_redis.start()  # Redis comes back, empty
        wait_until(lambda: answers_200(f"{root}/ready"))
        stack.start_worker()
        wait_until(lambda: stack.client.responses.retrieve(accepted.id).status == "completed")
        after = stack.client.responses.create(model="fake", input="after the outage")
        assert after.status == "completed"


def test_with_every_database_connection_taken_new_requests_get_503_and_a_running_stream_goes_on(
    environment: Environment, fake: FakeRuntime
) -> None:
    events: list[Any] = []
    with Stack(
        environment,
        RESPONSES_LEASE_SECONDS="30",
        RESPONSES_DB_POOL_SIZE="3",
        RESPONSES_DB_MAX_OVERFLOW="0",
        RESPONSES_DB_POOL_TIMEOUT="0.5",
    ) as stack:
        stack.start_worker()
        text = " ".join(f"w{i}" for i in range(40))
        stream = stack.client.responses.create(
            model="fake", input="#fake " + json.dumps({"text": text, "delay": 0.05}), background=True, stream=True
        )
        reader = threading.Thread(target=lambda: events.extend(stream))
        reader.start()
        wait_until(lambda: len(events) > 5)
        # Every statement on responses now waits, holding its connection, until the lock goes.
        locker = subprocess.Popen(
            [
                "psql",
                environment.database_url.replace("+asyncpg", ""),
                "-q",
                "-c",
                "BEGIN; LOCK TABLE responses IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;",
            ]
        )
        wait_until(
            lambda: environment.query(
                "SELECT 1 FROM pg_locks WHERE relation = 'responses'::regclass "
                "AND mode = 'AccessExclusiveLock' AND granted"
            )
        )
        url = f"{stack.client.base_url}responses/{events[0].response.id}"
        headers = {"Authorization": f"Bearer {stack.client.api_key}"}
        answers: list[httpx.Response] = []
        callers = [
            threading.Thread(target=lambda: answers.append(httpx.get(url, headers=headers, timeout=20)))
            for _ in range(4)
        ]
        for caller in callers:
            caller.start()
            time.sleep(0.05)
        # Those that found no connection in time are answered while the lock is still held.
        wait_until(lambda: any(a.status_code == 503 for a in answers), timeout=2.5)
        busy = [a for a in answers if a.status_code == 503]
        assert all(a.headers["retry-after"] == "1" for a in busy)
        assert "no database connection was free" in busy[0].json()["error"]["message"]
        locker.wait(10)
        for caller in callers:
            caller.join()
        reader.join(30)
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type == "response.completed" and events[-1].response.output_text == text
        # (with three connections, the backlog the lock left may still hold them all for a moment:
        # a 503 with Retry-After, which the SDK retries by default)
        assert stack.client.with_options(max_retries=2).responses.retrieve(events[0].response.id).status == "completed"


def test_postgres_restart_mid_generation(fake: FakeRuntime, restartable_stack: tuple[Stack, Restart]) -> None:
    stack, restart = restartable_stack
    stack.start_worker()
    script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(60)), "delay": 0.05})
    running = stack.client.responses.create(model="fake", input=script, background=True)
    wait_until(lambda: stack.client.responses.retrieve(running.id).status == "in_progress")
    restart()
    answers = [stack.client.responses.retrieve(running.id).status for _ in range(3)]
    assert set(answers) <= {"in_progress", "completed"}, answers
    wait_until(lambda: stack.client.responses.retrieve(running.id).status == "completed", timeout=30)
    done = stack.client.responses.retrieve(running.id)
    assert done.output_text == " ".join(f"w{i}" for i in range(60))  # nothing half-written
    assert stack.client.responses.create(model="fake", input="after").status == "completed"


def test_after_a_postgres_restart_no_request_fails_for_a_connection_that_broke_while_idle(
    fake: FakeRuntime, restartable_stack: tuple[Stack, Restart]
) -> None:
    stack, restart = restartable_stack
    client = stack.client

    def every_kind_of_request(turn: int) -> None:
        """Authentication, the insert of each kind of create, reads, the worker's claim and commits."""
        first = client.responses.create(model="fake", input=f"hello {turn}")
        assert first.status == "completed"
        assert client.responses.retrieve(first.id).output_text == first.output_text
        assert client.responses.create(model="fake", input="more", previous_response_id=first.id).status == "completed"
        assert client.responses.create(model="fake", input="unstored", store=False).status == "completed"
        with client.responses.stream(model="fake", input="streamed") as stream:
            assert stream.get_final_response().status == "completed"
        background = client.responses.create(model="fake", input="later", background=True)
        wait_until(lambda: client.responses.retrieve(background.id).status == "completed")
        assert [i.id for i in client.responses.input_items.list(first.id).data]

    stack.start_worker()
    every_kind_of_request(0)  # every held and pooled connection in use before the restart
    restart()
    for turn in range(1, 4):
        every_kind_of_request(turn)


def test_ready_says_postgres_is_down_while_it_is_and_recovers(
    fake: FakeRuntime, restartable_stack: tuple[Stack, Restart]
) -> None:
    stack, restart = restartable_stack
    ready = f"http://127.0.0.1:{stack.port}/ready"
    assert httpx.get(ready).json() == {
        "status": "ok",
        "postgres": "ok",
        "redis": "ok",
        "vector_stores": "unavailable: PostgreSQL has no pgvector extension",  # (the machine's has none)
        "web_search": WEB_SEARCH_OFF,
    }

    def while_down() -> None:
        answer = httpx.get(ready, timeout=10)
        assert answer.status_code == 503 and answer.json()["postgres"].startswith("unavailable")
        assert answer.json()["redis"] == "ok"
        assert httpx.get(f"http://127.0.0.1:{stack.port}/health").status_code == 200  # alive all the same

    restart(while_down)
    wait_until(lambda: answers_200(ready))

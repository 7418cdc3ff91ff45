"""Redis is a blip, not a fault: every process rides out an outage of Redis (here: its server
killed, then started again empty on the same port) and carries on when it is back, with no
process exiting, nothing left queued, and no generation failed for it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Environment, FakeRuntime, answers_200, free_port, wait_until
from tests.e2e.processes import PrivateRedis, Stack


def test_an_idle_worker_rides_out_redis_outages_and_takes_the_next_job(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    port = free_port()
    with Stack(environment, REDIS_URL=private_redis.url) as stack:
        worker = stack.start_worker(RESPONSES_WORKER_PORT=str(port))
        ready = f"http://127.0.0.1:{port}/ready"
        wait_until(lambda: answers_200(ready))
        for seconds in (1, 5, 30):
            private_redis.kill()
            time.sleep(seconds / 2)
            during = httpx.get(ready)
            assert during.status_code == 503 and during.json()["redis"].startswith("unavailable")
            time.sleep(seconds / 2)
            assert worker.poll() is None, f"the worker exited during a {seconds} s outage"
            private_redis.start()
            wait_until(lambda: answers_200(ready))
            response = stack.client.responses.create(model="fake", input=f"after {seconds} s", background=True)
            wait_until(lambda r=response: stack.client.responses.retrieve(r.id).status == "completed")  # type: ignore[misc]
            assert worker.poll() is None
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert _sample(metrics, "responses_redis_outages_total") == 3
        assert _sample(metrics, "responses_redis_up") == 1


def _sample(metrics: str, name: str) -> float:
    [line] = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_store_false_streams_get_their_whole_answer_across_a_redis_outage(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    words = [f"w{i}" for i in range(50)]
    script = "#fake " + json.dumps({"text": " ".join(words), "delay": 0.15})  # 7.5 s each
    with Stack(environment, REDIS_URL=private_redis.url, RESPONSES_LEASE_SECONDS="3") as stack:
        stack.start_worker()
        stack.client.responses.create(model="fake", input="warm up")
        streams: list[list[Any]] = [[] for _ in range(10)]
        started = threading.Barrier(len(streams) + 1)

        def follow(events: list[Any]) -> None:
            stream = stack.client.responses.create(model="fake", input=script, store=False, stream=True)
            started.wait()
            events.extend(stream)

        threads = [threading.Thread(target=follow, args=(events,)) for events in streams]
        for thread in threads:
            thread.start()
        started.wait()
        wait_until(lambda: all(sum(e.type == "response.output_text.delta" for e in s) > 3 for s in streams))
        private_redis.kill()
        time.sleep(5)
        private_redis.start()
        for thread in threads:
            thread.join(60)
        for events in streams:
            assert [e.type for e in events][-1] == "response.completed", [e for e in events if e.type == "error"]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == " ".join(words)
        assert len(fake.requests()) == 11  # each generated once


def test_a_store_false_stream_names_redis_when_it_stays_away(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(50)), "delay": 0.2})
    with Stack(environment, REDIS_URL=private_redis.url, RESPONSES_REDIS_OUTAGE_SECONDS="3") as stack:
        stack.start_worker()
        stream = stack.client.responses.create(model="fake", input=script, store=False, stream=True)
        with pytest.raises(openai.APIError) as ended:
            for event in stream:
                if event.type == "response.output_text.delta" and private_redis.answers():
                    private_redis.kill()
                    started = time.monotonic()
        assert "Redis" in ended.value.message and "worker" not in ended.value.message
        assert 3 <= time.monotonic() - started < 10


def test_a_running_durable_generation_completes_across_a_redis_outage(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    words = [f"w{i}" for i in range(50)]
    script = "#fake " + json.dumps({"text": " ".join(words), "delay": 0.15})
    with Stack(environment, REDIS_URL=private_redis.url) as stack:
        worker = stack.start_worker()
        stream = stack.client.responses.create(model="fake", input=script, background=True, stream=True)
        seen = []
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta":
                break
        stream.close()
        private_redis.kill()
        time.sleep(4)  # past the lease (2 s here): leases are kept in Postgres, not Redis
        private_redis.start()
        response_id = seen[0].response.id
        wait_until(lambda: stack.client.responses.retrieve(response_id).status != "in_progress")
        done = stack.client.responses.retrieve(response_id)
        assert done.status == "completed" and done.output_text == " ".join(words)
        assert worker.poll() is None
        replay = list(stack.client.responses.retrieve(response_id, stream=True, starting_after=-1))
        assert [e.sequence_number for e in replay] == list(range(len(replay)))


def test_an_api_rides_out_a_redis_outage_and_streams_again(
    environment: Environment, fake: FakeRuntime, private_redis: PrivateRedis
) -> None:
    with Stack(environment, REDIS_URL=private_redis.url) as stack:
        stack.start_worker()
        private_redis.kill()
        time.sleep(3)
        private_redis.start()
        root = f"http://127.0.0.1:{stack.port}"
        wait_until(lambda: answers_200(f"{root}/ready"))
        assert stack.api.poll() is None
        # The hub is subscribed again: a stream gets its events live.
        events = list(stack.client.responses.create(model="fake", input="after the outage", stream=True))
        assert events[-1].type == "response.completed"
        metrics = httpx.get(f"{root}/metrics").text
        assert _sample(metrics, "responses_redis_outages_total") >= 1
        assert _sample(metrics, "responses_redis_up") == 1

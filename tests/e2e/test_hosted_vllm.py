"""A worker that hosts a vLLM model, end to end, with a stand-in for the `vllm` executable that
serves the same HTTP contract: quick, and able to fake what a CPU engine cannot show (GPU flags,
a restart within a second). tests/vllm runs the same paths over real vLLM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from redis.asyncio import Redis

from tests.conftest import ROOT, Environment, FakeRuntime, api_client, free_port, start_worker, wait_until
from tests.e2e.processes import stand_in_vllm
from tests.integration.test_supervisor import alive

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(100)), "delay": 0.05})


class HostingWorker:
    def __init__(self, environment: Environment, tmp_path: Path, **env: str) -> None:
        bin_dir = stand_in_vllm(tmp_path)
        self.launches = tmp_path / "launches.jsonl"
        self.process = start_worker(
            environment,
            "--model",
            "hosted-vllm",
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            STAND_IN_VLLM_LOG=str(self.launches),
            **{"STAND_IN_VLLM_STARTUP_DELAY": "1", **env},
        )

    def launched(self) -> list[dict[str, object]]:
        if not self.launches.exists():
            return []
        return [json.loads(line) for line in self.launches.read_text().splitlines()]

    def server_pid(self) -> int:
        pid = self.launched()[-1]["pid"]
        assert isinstance(pid, int)
        return pid


@pytest.fixture
def hosting(environment: Environment, tmp_path: Path) -> Iterator[HostingWorker]:
    worker = HostingWorker(environment, tmp_path)
    yield worker
    if worker.process.poll() is None:
        worker.process.kill()
    worker.process.wait(10)
    for launch in worker.launched():
        if alive(int(str(launch["pid"]))):
            os.kill(int(str(launch["pid"])), signal.SIGKILL)


def wait_for(client: openai.OpenAI, response_id: str, status: str) -> None:
    wait_until(lambda: client.responses.retrieve(response_id).status == status, timeout=30)


def test_a_hosted_model_waits_for_its_worker_which_starts_vllm_with_the_catalogs_settings(
    client: openai.OpenAI, environment: Environment, tmp_path: Path, fake: FakeRuntime
) -> None:
    queued = client.responses.create(model="hosted-vllm", input="hello", background=True)
    time.sleep(1.0)
    assert client.responses.retrieve(queued.id).status == "queued"  # the session's plain worker leaves it
    worker = HostingWorker(environment, tmp_path)
    try:
        wait_for(client, queued.id, "completed")
        assert client.responses.retrieve(queued.id).output_text == "Echo: hello"
        [launch] = worker.launched()
        assert launch["model"] == "org/model-7b" and launch["served_model_name"] == "hosted-vllm"
        assert launch["tool_call_parser"] == "hermes" and launch["enable_auto_tool_choice"] is True
        assert launch["reasoning_parser"] == "qwen3" and launch["enable_prefix_caching"] is True
        assert launch["max_model_len"] == 4096
        assert fake_requests_model(worker) == "hosted-vllm"
        server = worker.server_pid()
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(30) == 0
        assert not alive(server)  # stopped with the worker
    finally:
        if worker.process.poll() is None:
            worker.process.kill()


def fake_requests_model(worker: HostingWorker) -> str:
    """The model name the stand-in server was asked for (it keeps its own request log)."""
    port = worker.launched()[-1]["port"]
    model: str = httpx.get(f"http://127.0.0.1:{port}/_requests").json()[-1]["model"]
    return model


def test_a_model_server_that_dies_fails_its_generations_and_comes_back(
    client: openai.OpenAI, hosting: HostingWorker
) -> None:
    stream = client.responses.create(model="hosted-vllm", input=SLOW, stream=True)
    seen, text = [], ""
    for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta" and "w4" not in text:
            text += event.delta  # deltas may arrive coalesced
            if "w4" in text:
                os.kill(hosting.server_pid(), signal.SIGKILL)
    assert seen[-1].type == "response.failed"
    failed = client.responses.retrieve(seen[0].response.id)
    assert failed.status == "failed" and failed.error is not None
    assert failed.output_text.startswith("w0 w1 w2 w3 w4")  # the partial output is kept
    # The next request waits for the restarted server rather than failing.
    again = client.responses.create(model="hosted-vllm", input="after the crash")
    assert again.status == "completed" and again.output_text == "Echo: after the crash"
    assert len(hosting.launched()) == 2


def test_the_workers_port_says_starting_ready_and_runtime_down_as_its_model_server_does(
    environment: Environment, tmp_path: Path, fake: FakeRuntime
) -> None:
    port = free_port()
    worker = HostingWorker(environment, tmp_path, RESPONSES_WORKER_PORT=str(port), STAND_IN_VLLM_STARTUP_DELAY="3")
    root = f"http://127.0.0.1:{port}"

    def get(path: str) -> httpx.Response | None:
        try:
            return httpx.get(f"{root}{path}", timeout=2)
        except httpx.TransportError:
            return None

    try:
        wait_until(lambda: get("/health") is not None, timeout=20)
        starting = get("/ready")
        assert starting is not None and starting.status_code == 503 and starting.json()["status"] == "starting"
        assert (get("/health") or httpx.Response(500)).status_code == 200  # alive while its model server starts
        wait_until(lambda: (get("/ready") or httpx.Response(500)).status_code == 200, timeout=30)
        assert (get("/ready") or httpx.Response(500)).json() == {
            "status": "ok",
            "postgres": "ok",
            "redis": "ok",
            "runtime": "ok",
        }
        os.kill(worker.server_pid(), signal.SIGKILL)
        wait_until(lambda: (get("/ready") or httpx.Response(200)).status_code == 503, timeout=10)
        assert (get("/ready") or httpx.Response(500)).json()["runtime"].startswith("unavailable")
        wait_until(lambda: (get("/ready") or httpx.Response(500)).status_code == 200, timeout=30)
        metrics = (get("/metrics") or httpx.Response(500)).text
        assert "responses_runtime_restarts_total 1.0" in metrics
        assert "responses_worker_generations_running 0.0" in metrics
        probe = subprocess.run(
            [sys.executable, "-m", "app.cli", "probe", "--port", str(port)], cwd=ROOT, capture_output=True, text=True
        )
        assert probe.returncode == 0, probe.stderr
    finally:
        worker.process.terminate()
        worker.process.wait(20)
        for launch in worker.launched():
            if alive(int(str(launch["pid"]))):
                os.kill(int(str(launch["pid"])), signal.SIGKILL)


def test_a_worker_refuses_to_host_what_it_cannot(environment: Environment) -> None:
    for model, complaint in [
        ("fake-model", "not started by a worker"),
        ("remote-embedder", "not started by a worker"),
        ("minilm", "not started by a worker"),
        ("no-such-model", "not in the catalog"),
        ("broken-vllm", "model server for 'broken-vllm' exited with 1 while starting"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "worker", "--model", model],
            cwd=ROOT,
            env=environment.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode != 0 and complaint in done.stderr


def test_the_prompt_is_measured_first_so_vllm_never_refuses_max_tokens(
    client: openai.OpenAI, hosting: HostingWorker
) -> None:
    # The catalog: context_window 4096, max_output_tokens 64. The stand-in counts one token a word.
    fits = client.responses.create(model="hosted-vllm", input="w " * 4050)
    assert fits.status == "incomplete"  # cut where the context ends, not refused
    port = hosting.launched()[-1]["port"]
    sent = httpx.get(f"http://127.0.0.1:{port}/_requests").json()
    assert sent[-1]["max_tokens"] == 4096 - 4050
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="hosted-vllm", input="w " * 4100)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert "4100 tokens" in caught.value.message
    assert len(httpx.get(f"http://127.0.0.1:{port}/_requests").json()) == len(sent)  # never sent to generate


def test_input_tokens_are_counted_by_the_models_server_with_nothing_stored(
    client: openai.OpenAI, hosting: HostingWorker, environment: Environment
) -> None:
    # The stand-in counts one token per word of every message, as vLLM's /tokenize counts tokens.
    first = client.responses.create(model="hosted-vllm", input="one two")  # answered "Echo: one two"
    before = environment.query("SELECT count(*) FROM responses")
    counted = client.responses.input_tokens.count(model="hosted-vllm", instructions="be brief", input="three four five")
    assert (counted.object, counted.input_tokens) == ("response.input_tokens", 5)
    chained = client.responses.input_tokens.count(model="hosted-vllm", previous_response_id=first.id, input="six")
    assert chained.input_tokens == 2 + 3 + 1
    # `input` is optional, as in OpenAI's API: the chain or the instructions alone are counted.
    assert client.responses.input_tokens.count(model="hosted-vllm", previous_response_id=first.id).input_tokens == 5
    assert client.responses.input_tokens.count(model="hosted-vllm", instructions="be brief").input_tokens == 2
    assert environment.query("SELECT count(*) FROM responses") == before


def test_input_tokens_are_refused_as_a_create_would_be(client: openai.OpenAI, fake: FakeRuntime) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.input_tokens.count(model="fake", input="x")  # an external server: cannot count
    assert (caught.value.body["param"], caught.value.body["code"]) == ("model", "unsupported_value")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.input_tokens.count(model="hosted-vllm", input="x", previous_response_id="resp_unknown")
    assert caught.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.input_tokens.count(model="hosted-vllm", input=[])
    assert caught.value.body["param"] == "input"


def test_input_tokens_with_no_worker_of_the_model_is_a_503_and_leaves_no_job(
    environment: Environment, api_key: str, fake: FakeRuntime
) -> None:
    with api_client(environment, api_key, RESPONSES_COUNT_TIMEOUT="1") as client:
        with pytest.raises(openai.InternalServerError) as caught:
            client.responses.input_tokens.count(model="hosted-vllm", input="x")
        assert caught.value.status_code == 503
    queue = f"{environment.queue_name}:model:hosted-vllm"
    waiting = asyncio.run(_queued_ids(environment.redis_url, queue))
    assert not [job for job in waiting if job.startswith("req_")]


async def _queued_ids(redis_url: str, queue: str) -> list[str]:
    redis = Redis.from_url(redis_url)
    try:
        return [job.decode() for job in await redis.zrange(queue, 0, -1)]
    finally:
        await redis.aclose()

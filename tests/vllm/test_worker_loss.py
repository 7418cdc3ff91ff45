"""Losing a worker or the engine, on real vLLM: a worker killed or stopped mid-answer is continued
by another through vLLM's `continue_final_message`; the hosting worker's readiness follows its
engine starting, dying and coming back. Runs last in the tier: it kills the engine once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import wait_until
from tests.vllm.conftest import EXTERNAL, HOSTED, VllmStack
from tests.vllm.test_lifecycle import LONG


class Follower:
    """Follows a background stream from its start, in a thread, until it ends."""

    def __init__(self, vllm: VllmStack, model: str) -> None:
        self.events: list[Any] = []
        self._thread = threading.Thread(target=self._follow, args=(vllm, model))
        self._thread.start()

    def _follow(self, vllm: VllmStack, model: str) -> None:
        stream = vllm.client.responses.create(
            model=model, input=LONG, background=True, stream=True, temperature=0, max_output_tokens=96
        )
        for event in stream:
            self.events.append(event)

    def deltas(self) -> int:
        return sum(e.type == "response.output_text.delta" for e in self.events)

    def text(self) -> str:
        return "".join(e.delta for e in self.events if e.type == "response.output_text.delta")

    def join(self) -> None:
        self._thread.join(120)
        assert not self._thread.is_alive()


def generating_worker(vllm: VllmStack, response_id: str) -> subprocess.Popen[bytes]:
    [row] = vllm.environment.query("SELECT worker_id FROM responses WHERE id = $1", response_id)
    pid = int(row["worker_id"].rsplit(":", 1)[1])
    [worker] = [w for w in vllm.plain_workers if w.pid == pid]
    return worker


def handed_over(vllm: VllmStack, signum: signal.Signals) -> Follower:
    """A follower of a response whose plain worker got `signum` mid-answer, followed to its end,
    with the checks any hand-over must pass: one unbroken answer, continued by vLLM itself from
    the answer so far (the request the worker sent it, and what it answered)."""
    follower = Follower(vllm, EXTERNAL)
    wait_until(lambda: follower.deltas() >= 8, timeout=60)
    response_id = follower.events[0].response.id
    worker = generating_worker(vllm, response_id)
    worker.send_signal(signum)
    follower.join()
    vllm.plain_workers.remove(worker)
    vllm.start_plain_worker()  # two again, for whatever runs next

    numbers = [e.sequence_number for e in follower.events]
    assert numbers == list(range(len(numbers)))
    final = follower.events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert follower.text() == final.response.output_text == vllm.client.responses.retrieve(response_id).output_text
    first, continuation = vllm.proxied()
    assert first["messages"][-1]["role"] == "user"
    assert continuation["messages"][:-1] == first["messages"]
    so_far = continuation["messages"][-1]
    assert so_far["role"] == "assistant" and so_far["content"] and follower.text().startswith(so_far["content"])
    assert len(follower.text()) > len(so_far["content"])  # vLLM went on from there
    assert continuation["continue_final_message"] is True and continuation["add_generation_prompt"] is False
    [row] = vllm.environment.query("SELECT continuations FROM responses WHERE id = $1", response_id)
    assert row["continuations"] == 1
    return follower


def test_a_killed_workers_answer_is_continued_by_vllm_on_another_worker(vllm: VllmStack) -> None:
    handed_over(vllm, signal.SIGKILL)


def test_a_stopped_workers_answer_is_handed_over_at_once(vllm: VllmStack) -> None:
    handed_over(vllm, signal.SIGTERM)


def engine_process(hosting: subprocess.Popen[bytes]) -> int:
    """The `vllm serve` process the hosting worker started (its child, leading its own group)."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == hosting.pid:
            return int(status.parent.name)
    raise AssertionError("the hosting worker has no child")


def test_the_hosting_workers_readiness_follows_its_engine(vllm: VllmStack) -> None:
    # While the engine started (the tier's start), the worker said so.
    statuses = [answer["status"] for answer in vllm.readiness_seen]
    assert statuses[0] == "starting" and statuses[-1] == "ok"
    assert vllm.readiness_seen[-1]["runtime"] == "ok"

    client = vllm.client
    running = client.responses.create(model=HOSTED, input=LONG, background=True, temperature=0, max_output_tokens=256)
    wait_until(lambda: client.responses.retrieve(running.id).output_text, timeout=60)
    os.killpg(engine_process(vllm.hosting), signal.SIGKILL)  # the engine dies, all its processes

    wait_until(lambda: vllm.note_readiness() == 503, timeout=15)
    assert vllm.readiness_seen[-1]["runtime"].startswith("unavailable")
    wait_until(lambda: client.responses.retrieve(running.id).status == "failed", timeout=30)
    failed = client.responses.retrieve(running.id)
    assert failed.error is not None and failed.output_text  # its output so far is kept

    wait_until(lambda: vllm.note_readiness() == 200, timeout=240)  # restarted by the worker
    metrics = httpx.get(f"{vllm.worker_url}/metrics").text
    assert "responses_runtime_restarts_total 1.0" in metrics
    assert "responses_worker_generations_running 0.0" in metrics
    after = client.responses.create(model=HOSTED, input="Say hello.", max_output_tokens=16)
    assert after.status in ("completed", "incomplete") and after.output_text

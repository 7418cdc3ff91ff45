"""Metrics move as responses run, on an API process and on a worker's port, and every metric the
Grafana dashboard in docs/ uses is served (docs/metrics.md)."""

from __future__ import annotations

import json
import re
import secrets

import httpx

from tests.conftest import (
    ROOT,
    Environment,
    FakeRuntime,
    answers_200,
    api_client,
    free_port,
    start_worker,
    stop,
    wait_until,
)

DASHBOARD = ROOT / "docs" / "grafana" / "responses-server.json"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus's text format (labels in any order); 0 if absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
        if all(found.get(key) == value for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_move_as_responses_run_and_the_dashboard_uses_only_served_ones(
    environment: Environment, api_key: str, fake: FakeRuntime
) -> None:
    queue = f"responses:metrics:{secrets.token_hex(4)}"
    port = free_port()
    worker = start_worker(environment, RESPONSES_QUEUE=queue, RESPONSES_WORKER_PORT=str(port))
    try:
        with api_client(environment, api_key, RESPONSES_QUEUE=queue) as client:
            api_root = str(client.base_url).removesuffix("/v1/")
            wait_until(lambda: answers_200(f"http://127.0.0.1:{port}/ready"))
            client.responses.create(model="fake", input="one")
            list(client.responses.create(model="fake", input="two", stream=True))
            background = client.responses.create(model="fake", input="three", background=True)
            wait_until(lambda: client.responses.retrieve(background.id).status == "completed")
            waiting = client.responses.create(model="hosted-vllm", input="nobody hosts it", background=True)
            api = httpx.get(f"{api_root}/metrics").text
            client.responses.cancel(waiting.id)
        served = api + httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        stop(worker)

    for mode in ("json", "stream", "background"):  # ("fake" is an alias: metrics name the model's id)
        assert sample(api, "responses_created_total", model="fake-model", mode=mode) == 1
    assert sample(api, "responses_http_requests_total", route="create", method="POST", status="200") == 4
    assert sample(api, "responses_http_requests_total", route="retrieve", method="GET", status="200") >= 1
    assert sample(api, "responses_queued", model="hosted-vllm") >= 1
    assert sample(api, "responses_oldest_queued_seconds", model="hosted-vllm") >= 0
    assert sample(served, "responses_finished_total", model="fake-model", status="completed") == 3
    assert sample(served, "responses_time_to_first_token_seconds_count", model="fake-model") == 3
    for step in ("queued", "take", "claim", "first_token"):
        assert sample(served, "responses_start_step_seconds_count", model="fake-model", step=step) == 3
    assert sample(served, "responses_output_tokens_total", model="fake-model") >= 3
    assert sample(served, "responses_worker_events_committed_total") > 0
    assert sample(served, "process_cpu_seconds_total") > 0

    dashboard = json.loads(DASHBOARD.read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(responses_[a-z_]+)", target["expr"])
    }
    assert len(used) >= 15
    # (Only a worker hosting a model restarts one: test_hosted_vllm.py reads that one from such a worker.)
    missing = {name for name in used if not re.search(rf"^{name}[{{ ]", served, re.MULTILINE)}
    assert missing == {"responses_runtime_restarts_total"}

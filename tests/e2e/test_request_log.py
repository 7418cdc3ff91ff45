"""Each request leaves one structured log line (request id, account, model, status, durations), and
a JSON answer carries its phases in Server-Timing; each generation leaves one in its worker's log
(status, tokens, the steps of its start)."""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import (
    Environment,
    FakeRuntime,
    free_port,
    start_api,
    start_logged,
    stop,
    wait_for_http,
    wait_until,
)


def whole_lines(log_path: Path) -> list[str]:
    """The log's lines, but not the one a process is writing now."""
    written = log_path.read_text()
    return [line for line in written[: written.rfind("\n") + 1].splitlines() if line.strip()]


def test_a_json_create_tells_its_phases_and_every_request_logs_one_json_line(
    environment: Environment, api_key: str, fake: FakeRuntime, tmp_path: Path, server: object
) -> None:
    port, log_path = free_port(), tmp_path / "api.log"
    api = start_logged(environment, log_path, "api", "--port", str(port), RESPONSES_LOG_FORMAT="json")
    try:
        wait_for_http(f"http://127.0.0.1:{port}/ready", api)
        headers = {"Authorization": f"Bearer {api_key}"}
        created = httpx.post(
            f"http://127.0.0.1:{port}/v1/responses",
            json={"model": "fake", "input": "timed"},
            headers=headers,
            timeout=30,
        )
        assert created.status_code == 200
        timing = dict(re.findall(r"(\w+);dur=([\d.]+)", created.headers["server-timing"]))
        assert list(timing) == ["validate", "queue", "first_token", "total"]  # (its worker stored it)
        assert float(timing["first_token"]) <= float(timing["total"])
        body = {"model": "fake", "input": "timed", "background": True}
        queued = httpx.post(f"http://127.0.0.1:{port}/v1/responses", json=body, headers=headers, timeout=30)
        timing = dict(re.findall(r"(\w+);dur=([\d.]+)", queued.headers["server-timing"]))
        assert list(timing) == ["validate", "store", "queue", "total"]  # (stored by the API, answered queued)
        refused = httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_unknown", headers=headers, timeout=10)
        assert refused.status_code == 404

        def lines() -> list[dict[str, Any]]:  # every line, each one JSON object
            return [json.loads(line) for line in whole_lines(log_path)]

        def requests() -> dict[object, dict[str, Any]]:  # request id → its line
            return {r["request_id"]: r for r in lines() if r["logger"] == "responses_server.request"}

        # A request's line is written once its answer is sent: the client may read the answer first.
        asked = [answer.headers["x-request-id"] for answer in (created, queued, refused)]
        wait_until(lambda: set(asked) <= set(requests()))
        logged = requests()
        create_line = logged[created.headers["x-request-id"]]
        assert create_line["method"] == "POST" and create_line["path"] == "/v1/responses"
        assert create_line["status"] == 200 and create_line["model"] == "fake-model"
        assert create_line["response_id"] == created.json()["id"]
        assert str(create_line["account"]).startswith("acct_")
        assert isinstance(create_line["duration_ms"], float) and "first_token_ms" in create_line
        assert logged[refused.headers["x-request-id"]]["status"] == 404
        assert all(line["path"] not in ("/ready", "/health") for line in logged.values())  # probes: not logged
        assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines())
    finally:
        stop(api)


def test_a_generation_logs_one_line_with_the_steps_of_its_start(
    environment: Environment, api_key: str, fake: FakeRuntime, tmp_path: Path
) -> None:
    queue = {"RESPONSES_QUEUE": f"responses:test:generation-log:{secrets.token_hex(4)}"}  # this worker's alone
    port, log_path = free_port(), tmp_path / "worker.log"
    api = start_api(environment, port, **queue)
    worker = start_logged(environment, log_path, "worker", RESPONSES_LOG_FORMAT="json", **queue)
    try:
        # The runtime takes 0.3 s before its first token: the longest step of the start is the
        # model's. Its later tokens come 50 ms apart: the first is committed before the answer ends.
        script = "#fake " + json.dumps({"text": "one two three", "first_delay": 0.3, "delay": 0.05})
        body = {"model": "fake", "input": script, "stream": True}
        first_token_at = response_id = None
        with httpx.stream(
            "POST",
            f"http://127.0.0.1:{port}/v1/responses",
            json=body,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30,
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    response_id = response_id or event["response"]["id"]
                    if event["type"] == "response.output_text.delta" and first_token_at is None:
                        first_token_at = time.time()
        assert response_id is not None and first_token_at is not None

        def generation_lines() -> list[dict[str, Any]]:
            lines = [json.loads(line) for line in whole_lines(log_path) if line.startswith("{")]
            return [line for line in lines if line["logger"] == "responses_server.generation"]

        wait_until(lambda: generation_lines())
        [logged] = generation_lines()
        assert logged["response_id"] == response_id and logged["model"] == "fake-model"
        assert logged["status"] == "completed" and logged["output_tokens"] == 3
        steps = {name: logged[f"{name}_ms"] for name in ("queued", "take", "claim", "ask", "first_token", "commit")}
        assert all(isinstance(ms, float) and ms >= 0 for ms in steps.values())
        assert logged["first_token_ms"] >= 300
        assert logged["duration_ms"] >= logged["first_token_ms"] + logged["commit_ms"]
        # Laid end to end from the job's enqueueing, the steps reach the runtime's first token
        # (through the runtime request; the claim, from the take too, before the first commit),
        # which the client sees only after its commit (one machine's clock; 0.1 ms rounding each).
        taken = logged["enqueued_at"] + (steps["queued"] + steps["take"]) / 1000
        assert taken + (steps["ask"] + steps["first_token"]) / 1000 <= first_token_at + 0.001
        assert taken + steps["claim"] / 1000 <= first_token_at + 0.001
        opening = f"response {response_id} completed (fake-model): 3 output tokens; queued "
        assert logged["message"].startswith(opening)
    finally:
        stop(worker, api)

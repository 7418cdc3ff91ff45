"""Each request leaves one structured log line (request id, account, model, status, durations), and
a JSON answer carries its phases in Server-Timing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import ROOT, Environment, FakeRuntime, free_port, stop, wait_for_http, wait_until


def test_a_json_create_tells_its_phases_and_every_request_logs_one_json_line(
    environment: Environment, api_key: str, fake: FakeRuntime, tmp_path: Path, server: object
) -> None:
    port, log_path = free_port(), tmp_path / "api.log"
    with log_path.open("wb") as log:
        api = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api", "--port", str(port)],
            cwd=ROOT,
            env=environment.env(RESPONSES_LOG_FORMAT="json"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
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
        assert list(timing) == ["validate", "store", "queue", "first_token", "total"]
        assert float(timing["first_token"]) <= float(timing["total"])
        refused = httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_unknown", headers=headers, timeout=10)
        assert refused.status_code == 404

        def lines() -> list[dict[str, object]]:  # every line, each one JSON object
            return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]

        wait_until(lambda: len([r for r in lines() if r["logger"] == "responses_server.request"]) >= 2)
        requests = {r["request_id"]: r for r in lines() if r["logger"] == "responses_server.request"}
        create_line = requests[created.headers["x-request-id"]]
        assert create_line["method"] == "POST" and create_line["path"] == "/v1/responses"
        assert create_line["status"] == 200 and create_line["model"] == "fake-model"
        assert create_line["response_id"] == created.json()["id"]
        assert str(create_line["account"]).startswith("acct_")
        assert isinstance(create_line["duration_ms"], float) and "first_token_ms" in create_line
        assert requests[refused.headers["x-request-id"]]["status"] == 404
        assert all(line["path"] not in ("/ready", "/health") for line in requests.values())  # probes: not logged
        assert all(set(line) >= {"time", "level", "logger", "message"} for line in lines())
    finally:
        stop(api)

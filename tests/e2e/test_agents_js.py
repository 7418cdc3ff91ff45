"""The OpenAI Agents SDK for JavaScript (`@openai/agents`) runs a tool-using agent over WebSocket
mode (`setOpenAIResponsesTransport("websocket")`), as tests/e2e/test_agents_sdk.py runs the
Python one: the model calls a tool, the agent runs it and sends its result back on the socket,
the model answers. The SDK is installed once per machine by tests/e2e/agents_js/setup.sh (CI runs
it); without Node.js the test is skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, Environment, FakeRuntime, Server, free_port, start_logged, stop, wait_for_http

AGENTS_JS = ROOT / "tests" / "e2e" / "agents_js"
CALL = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
PROMPT = "#fake " + json.dumps({"tool_calls": [CALL], "then": {"text": "Sunny in Paris, it says."}})


@pytest.fixture(scope="module")
def agents_js() -> Path:
    """The folder the SDK is installed in, with the agent's script beside its node_modules (an ES
    module finds its packages from where it lies)."""
    if shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed")
    done = subprocess.run(
        ["bash", str(AGENTS_JS / "setup.sh")], capture_output=True, text=True, timeout=600, check=True
    )
    home = Path(done.stdout.strip())
    shutil.copy(AGENTS_JS / "socket_agent.mjs", home / "socket_agent.mjs")
    return home


def test_a_js_agent_runs_its_tool_loop_over_the_socket(
    agents_js: Path, environment: Environment, server: Server, api_key: str, fake: FakeRuntime, tmp_path: Path
) -> None:
    """(`server`: its worker serves this API's queue too.)"""
    fake.reset()
    port, log_path = free_port(), tmp_path / "api.log"
    api = start_logged(environment, log_path, "api", "--port", str(port))
    try:
        wait_for_http(f"http://127.0.0.1:{port}/ready", api)
        done = subprocess.run(
            ["node", str(agents_js / "socket_agent.mjs"), PROMPT],
            env={**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": api_key},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop(api)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["final_output"] == "Sunny in Paris, it says." and result["ran"] == ["Paris"]
    first, second = fake.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == ["Sunny in Paris"]
    log = log_path.read_text()
    assert '"WebSocket /v1/responses" [accepted]' in log
    assert "POST /v1/responses" not in log  # both model calls went over the socket

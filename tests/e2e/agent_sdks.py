"""The Agents SDKs as the tests drive them: Python's model over HTTP or the WebSocket mode, and a
script of JavaScript's (tests/e2e/agents_js) run by Node against a server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import OpenAIResponsesModel, OpenAIResponsesWSModel
from openai import AsyncOpenAI

from tests.conftest import ROOT

AGENTS_JS = ROOT / "tests" / "e2e" / "agents_js"


@asynccontextmanager
async def responses_model(
    client: AsyncOpenAI, transport: str
) -> AsyncIterator[OpenAIResponsesModel | OpenAIResponsesWSModel]:
    """Model "fake" over `transport` ("http" or "websocket"), its socket closed afterwards."""
    if transport == "websocket":
        socket_model = OpenAIResponsesWSModel(model="fake", openai_client=client)
        try:
            yield socket_model
        finally:
            await socket_model.close()
    else:
        yield OpenAIResponsesModel(model="fake", openai_client=client)


def run_js_agent(script: str, prompt: str, base_url: str, api_key: str, **env: str) -> dict[str, Any]:
    """Runs tests/e2e/agents_js/SCRIPT with the prompt against the server (the SDK installed once
    per machine by setup.sh; skipped without Node.js); the JSON line it printed last."""
    if shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed")
    done = subprocess.run(
        ["bash", str(AGENTS_JS / "setup.sh")], capture_output=True, text=True, timeout=600, check=True
    )
    home = Path(done.stdout.strip())
    shutil.copy(AGENTS_JS / script, home / script)  # (an ES module finds its packages from where it lies)
    ran = subprocess.run(
        ["node", str(home / script), prompt],
        env={**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result

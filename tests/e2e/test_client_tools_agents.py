"""Both Agents SDKs' shell and apply_patch tools against real processes (Python's over HTTP and
the WebSocket mode, JavaScript's over the WebSocket mode): an edit-and-test loop in a temporary
workspace. The model writes a program with a
patch (the SDK's editor applies it), runs it with the shell (the SDK's executor runs it), reads
what it printed, fixes the program with a second patch, runs it again, and answers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ApplyPatchOperation,
    ApplyPatchResult,
    ApplyPatchTool,
    Runner,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    ShellTool,
    apply_diff,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.conftest import FakeRuntime, Server
from tests.e2e.agent_sdks import responses_model, run_js_agent

set_tracing_disabled(True)  # the SDK would export traces to OpenAI


WRITE = "*** Begin Patch\n*** Add File: greet.py\n+print('helo')\n*** End Patch"
FIX = "*** Begin Patch\n*** Update File: greet.py\n@@\n-print('helo')\n+print('hello')\n*** End Patch"
RUN = {"commands": ["python3 greet.py"]}


def _call(name: str, arguments: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    call_id = f"call_{name}_{len(json.dumps(then))}"  # (unique in the loop, as an engine's are)
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": json.dumps(arguments)}], "then": then}


# Each `then` is the answer after the n-th round of tool results (tests/fake_runtime.py).
LOOP = "#fake " + json.dumps(
    _call(
        "apply_patch",
        {"input": WRITE},
        _call(
            "shell",
            RUN,
            _call("apply_patch", {"input": FIX}, _call("shell", RUN, {"text": "It prints hello now."})),
        ),
    )
)


class Workspace:
    """The SDK's editor and shell executor, in one folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        (self.root / operation.path).write_text(apply_diff("", operation.diff or "", mode="create"))
        return ApplyPatchResult(status="completed", output=f"created {operation.path}")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        path = self.root / operation.path
        path.write_text(apply_diff(path.read_text(), operation.diff or ""))
        return ApplyPatchResult(status="completed", output=f"updated {operation.path}")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        (self.root / operation.path).unlink()
        return ApplyPatchResult(status="completed")

    def run(self, request: ShellCommandRequest) -> ShellResult:
        outputs = []
        for command in request.data.action.commands:
            done = subprocess.run(command, shell=True, cwd=self.root, capture_output=True, text=True, timeout=30)
            outcome = ShellCallOutcome(type="exit", exit_code=done.returncode)
            outputs.append(ShellCommandOutput(stdout=done.stdout, stderr=done.stderr, outcome=outcome, command=command))
        return ShellResult(output=outputs)


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_the_agents_sdk_edits_and_tests_a_program_with_shell_and_apply_patch(
    server: Server, api_key: str, fake: FakeRuntime, tmp_path: Path, transport: str
) -> None:
    workspace = Workspace(tmp_path)
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    async with responses_model(client, transport) as model:
        tools: list[Any] = [ShellTool(executor=workspace.run), ApplyPatchTool(editor=workspace)]
        agent = Agent(name="coder", instructions="Write and test code.", tools=tools, model=model)
        result = await Runner.run(agent, LOOP, max_turns=8)
    assert result.final_output == "It prints hello now."
    assert (tmp_path / "greet.py").read_text().strip() == "print('hello')"
    calls = [_type(item.raw_item) for item in result.new_items if item.type == "tool_call_item"]
    assert calls == ["apply_patch_call", "shell_call", "apply_patch_call", "shell_call"]
    _assert_the_model_read_each_step(fake)


def test_the_js_agents_sdk_edits_and_tests_a_program_over_the_websocket_mode(
    server: Server, api_key: str, fake: FakeRuntime, tmp_path: Path
) -> None:
    result = run_js_agent("coding_agent.mjs", LOOP, server.base_url, api_key, WORKSPACE=str(tmp_path))
    assert result["final_output"] == "It prints hello now."
    assert result["calls"] == ["apply_patch_call", "shell_call", "apply_patch_call", "shell_call"]
    assert (tmp_path / "greet.py").read_text().strip() == "print('hello')"
    _assert_the_model_read_each_step(fake)


def _assert_the_model_read_each_step(fake: FakeRuntime) -> None:
    told = [m["content"] for m in fake.requests()[-1]["messages"] if m["role"] == "tool"]
    assert told[1] == "$ python3 greet.py\nhelo\n\n(exit 0)" and told[3] == "$ python3 greet.py\nhello\n\n(exit 0)"
    assert told[0].startswith("Applied") and told[2].startswith("Applied")


def _type(raw: Any) -> Any:
    return raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)

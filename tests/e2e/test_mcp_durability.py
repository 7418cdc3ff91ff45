"""A tool loop survives its worker (design invariant 4): a worker killed or shut down before,
during or after an MCP call, with a second worker alive, is continued by the other from its last
committed step. A finished call is never made again; one in flight is made again only when its
tool is read-only, else it ends failed and the model is told. Counted at the MCP server."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack
from tests.e2e.test_continuation import Follower, running_worker, two_workers
from tests.fake_runtime import prompt_tokens
from tests.mcp_server import McpTestServer
from tests.mcp_server import tool_call as call

WORDS = " ".join(f"w{i}" for i in range(60))


@pytest.fixture
def environment(database_of_its_own: Environment) -> Environment:
    """(Its workers are killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return database_of_its_own


class LoopFollower(Follower):
    """A background stream of a response with the test server's tools, followed to its end."""

    def __init__(self, stack: Stack, server: McpTestServer, script: dict[str, Any]) -> None:
        self.tools = [{"type": "mcp", "server_label": "tools", "server_url": server.url, "require_approval": "never"}]
        super().__init__(stack.client, "continuing-model", "#fake " + json.dumps(script))

    def _follow(self, client: Any, model: str, script: str) -> None:
        for event in client.responses.create(model=model, input=script, tools=self.tools, background=True, stream=True):
            self.events.append(event)
            self.created.set()

    def calls(self) -> list[Any]:
        return [item for item in self.events[-1].response.output if item.type == "mcp_call"]


def assert_whole(follower: LoopFollower) -> None:
    numbers = [event.sequence_number for event in follower.events]
    assert numbers == list(range(len(numbers)))  # no gap, no duplicate, across the handover
    assert follower.events[-1].type == "response.completed"


def cut_loop(
    stack: Stack,
    server: McpTestServer,
    script: dict[str, Any],
    when: Callable[[LoopFollower], bool],
    how: signal.Signals = signal.SIGKILL,
) -> LoopFollower:
    """A loop whose worker gets `how` once `when` holds, with a second worker alive, followed to
    its end: one whole stream."""
    workers = two_workers(stack, stack.environment)
    follower = LoopFollower(stack, server, script)
    wait_until(lambda: when(follower))
    running_worker(stack.environment, follower.response_id, workers).send_signal(how)
    follower.join()
    assert_whole(follower)
    return follower


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_read_only_call_in_flight_is_made_again(
    environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer, how: signal.Signals
) -> None:
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="30") as stack:
        script = {"tool_calls": [call("slow", seconds=3)], "then": {"text": "waited"}}
        follower = cut_loop(stack, mcp_server, script, lambda _: mcp_server.started["slow"] == 1, how)
        [made] = follower.calls()
        assert (made.status, made.output, made.error) == ("completed", "waited 3.0", None)
        assert mcp_server.started["slow"] == 2  # in flight, and read-only: made again
        assert follower.events[-1].response.output_text == "waited"
        assert_every_round_counted(follower, fake)


def assert_every_round_counted(follower: LoopFollower, fake: FakeRuntime) -> None:
    """The usage of a loop continued between two steps: every round's prompt as the runtime
    counted it, the dead worker's round too (the fake counts what it reports alike)."""
    usage = follower.events[-1].response.usage
    rounds = fake.requests()
    assert len(rounds) == 2  # the first worker's round, then the answer with the call's result
    assert usage is not None and usage.input_tokens == sum(prompt_tokens(r) for r in rounds)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_writing_call_in_flight_is_not_made_again_and_the_model_is_told(
    environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    with Stack(environment) as stack:
        script = {"tool_calls": [call("slow_note", text="pay rent", seconds=3)], "then": {"text": "Checked."}}
        follower = cut_loop(stack, mcp_server, script, lambda _: mcp_server.started["slow_note"] == 1)
        [failed] = follower.calls()
        assert failed.status == "failed" and failed.error is not None
        assert failed.error.type == "http_error" and "may or may not have been made" in failed.error.message
        assert mcp_server.started["slow_note"] == 1  # never made a second time
        told = fake.requests()[-1]["messages"][-1]
        assert told["role"] == "tool" and "may or may not have been made" in told["content"]
        assert_every_round_counted(follower, fake)


def test_killed_after_a_call_the_answer_goes_on_and_the_call_is_not_made_again(
    environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    with Stack(environment) as stack:
        script = {"tool_calls": [call("note", text="once")], "then": {"text": WORDS, "delay": 0.05}}
        follower = cut_loop(stack, mcp_server, script, lambda cut: cut.deltas() >= 10)
        assert follower.text == WORDS == follower.events[-1].response.output_text
        assert mcp_server.notes == ["once"]
        continued = fake.requests()[-1]
        assert continued["messages"][-1]["role"] == "assistant" and continued["messages"][-2]["role"] == "tool"


def test_killed_before_a_call_the_answer_is_continued_and_the_call_made_once(
    environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    with Stack(environment) as stack:
        script = {"text": WORDS, "delay": 0.05, "tool_calls": [call("add", a=2, b=2)], "then": {"text": "4"}}
        follower = cut_loop(stack, mcp_server, script, lambda cut: cut.deltas() >= 10)
        output = follower.events[-1].response.output
        assert [item.type for item in output] == ["mcp_list_tools", "message", "mcp_call", "message"]
        assert output[1].content[0].text == WORDS and output[3].content[0].text == "4"
        assert mcp_server.calls["add"] == 1


def test_a_call_past_its_time_fails_and_the_loop_goes_on_within_the_responses_time(
    environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    with Stack(
        environment, RESPONSES_MCP_CALL_TIMEOUT_SECONDS="1", RESPONSES_MCP_RESPONSE_TIMEOUT_SECONDS="1.5"
    ) as stack:
        stack.start_worker()
        script = {
            "tool_calls": [call("slow", seconds=5)],
            "then": {
                "tool_calls": [call("add", a=1, b=1)],
                "then": {
                    "tool_calls": [call("slow", seconds=5)],  # cut where the response's time ends
                    "then": {"tool_calls": [call("add", a=2, b=2)], "then": {"text": "out of time"}},
                },
            },
        }
        follower = LoopFollower(stack, mcp_server, script)
        follower.join()
        assert_whole(follower)
        late, added, late_again, spent = follower.calls()
        assert late.status == "failed" and late.error is not None and late.error.type == "http_error"
        assert (late.error.code, late.error.message) == (504, "the MCP server did not answer in time")
        assert (added.status, added.output) == ("completed", "2")  # a new session after the late one
        assert late_again.error is not None and late_again.error.code == 504
        assert spent.error is not None and spent.error.message == "this response's time for MCP calls is spent"
        assert mcp_server.calls["add"] == 1

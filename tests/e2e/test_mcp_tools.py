"""Remote MCP tools run by the server: against real MCP servers on loopback (tests/mcp_server.py,
built with the same `mcp` package), with the fake runtime scripted to call their tools. The
event order is OpenAI's as recorded (../shared/reference/hosted-tools.md §1.4)."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
    OpenAIResponsesModel,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from openai.types.responses.response_output_item import McpApprovalRequest

from tests.conftest import ROOT, Environment, FakeRuntime, Server, api_client, create_key, wait_until
from tests.mcp_server import McpTestServer
from tests.mcp_server import tool_call as call
from tests.webhook_receiver import Receiver

TOKEN = "mcp-secret-token-7d1f"
set_tracing_disabled(True)  # the Agents SDK would export traces to OpenAI


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def mcp_tool(server: McpTestServer, label: str = "tools", **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "server_url": server.url, "require_approval": "never", **fields}


def sse(server: Server, key: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, headers=headers) as answer:
        assert answer.status_code == 200, answer.read().decode()
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """Event types, with runs of text deltas as one."""
    listed: list[str] = []
    for event in events:
        if not (event["type"] == "response.output_text.delta" and listed and listed[-1] == event["type"]):
            listed.append(event["type"])
    return listed


# OpenAI's order for one list, one call and an answer (hosted-tools.md §1.4).
ONE_CALL_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.output_item.done",
    "response.output_item.added",
    "response.mcp_call.in_progress",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.mcp_call.completed",
    "response.output_item.done",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_a_call_streams_in_openais_order_and_the_model_answers_with_its_result(
    server: Server, api_key: str, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    text = script(tool_calls=[call("add", a=2, b=3)], then={"text": "The sum is 5."})
    events = sse(server, api_key, {"model": "fake", "input": text, "tools": [mcp_tool(mcp_server)]})
    assert kinds(events) == ONE_CALL_ORDER
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    listed = events[5]["item"]
    assert listed["type"] == "mcp_list_tools" and listed["server_label"] == "tools"
    assert {tool["name"] for tool in listed["tools"]} == {"add", "note", "fail", "slow", "slow_note", "big"}
    assert next(t for t in listed["tools"] if t["name"] == "add")["annotations"] == {"read_only": True}
    opened = events[6]["item"]
    assert opened["type"] == "mcp_call" and opened["arguments"] == "" and "status" not in opened
    assert events[8]["delta"] == events[9]["arguments"] == '{"a": 2, "b": 3}'
    done = events[11]["item"]
    assert (done["name"], done["output"], done["error"], done["status"]) == ("add", "5", None, "completed")
    assert done["approval_request_id"] is None
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][2]["content"][0]["text"] == "The sum is 5."
    assert mcp_server.calls["add"] == 1
    # The model was offered the server's tools, then shown the call and its result.
    first, second = fake.requests()
    assert {tool["function"]["name"] for tool in first["tools"]} == {"add", "note", "fail", "slow", "slow_note", "big"}
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "add"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": done["id"], "content": "5"}
    # Usage sums both inference requests.
    assert final["usage"]["input_tokens"] > len(first["messages"][-1]["content"].split())


def test_the_sdk_reads_the_loop_and_retrieve_and_input_items_show_it(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    text = script(tool_calls=[call("add", a=20, b=22)], then={"text": "42."})
    with client.responses.stream(model="fake", input=text, tools=[mcp_tool(mcp_server)]) as stream:  # type: ignore[list-item]
        seen = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.mcp_call.completed" in seen
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    stored = client.responses.retrieve(final.id)
    assert stored.output[:2] == final.output[:2] and stored.output[1].output == "42"
    listed = client.responses.input_items.list(final.id)
    assert [item.type for item in listed.data] == ["message"]


def test_credentials_reach_the_mcp_server_and_are_never_stored_or_echoed(
    server: Server, client: openai.OpenAI, environment: Environment, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tool = mcp_tool(mcp_server, authorization=TOKEN, headers={"X-Tenant": f"tenant-{TOKEN}"})
    text = script(tool_calls=[call("add", a=1, b=1)], then={"text": "2."})
    response = client.responses.create(model="fake", input=text, tools=[tool])  # type: ignore[list-item]
    assert response.status == "completed"
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in mcp_server.headers)
    assert all(h.get("x-tenant") == f"tenant-{TOKEN}" for h in mcp_server.headers)
    echoed = response.model_dump()["tools"][0]
    assert echoed["authorization"] == "<redacted>" and echoed["headers"] == {"X-Tenant": "<redacted>"}
    assert TOKEN not in client.responses.retrieve(response.id).model_dump_json()
    # Nowhere in Postgres (every table, as pg_dump would show it) nor in Redis.
    dump = subprocess.run(
        ["pg_dump", "--data-only", environment.database_url.replace("+asyncpg", "")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert response.id in dump and TOKEN not in dump
    redis_text = subprocess.run(
        ["redis-cli", "-u", environment.redis_url, "--scan"], capture_output=True, text=True, check=True
    ).stdout
    assert f"mcp-credentials:{response.id}" not in redis_text  # (deleted at its end)


def test_a_chain_keeps_the_tool_list_and_does_not_list_again(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server)]
    first = client.responses.create(model="fake", input="hello", tools=tools)  # type: ignore[arg-type]
    assert [item.type for item in first.output] == ["mcp_list_tools", "message"]
    assert mcp_server.methods["tools/list"] == 1
    text = script(tool_calls=[call("add", a=4, b=5)], then={"text": "9."})
    second = client.responses.create(model="fake", input=text, tools=tools, previous_response_id=first.id)  # type: ignore[arg-type]
    assert [item.type for item in second.output] == ["mcp_call", "message"]
    assert mcp_server.methods["tools/list"] == 1 and mcp_server.calls["add"] == 1
    assert {tool["function"]["name"] for tool in fake.requests()[-1]["tools"]} >= {"add"}


def test_a_turn_that_allows_a_tool_its_chains_list_lacks_lists_again(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    """The list a chain holds was made under its turn's allowed_tools: a later turn that names a
    tool missing from it lists again; one that allows fewer reuses it, filtered."""
    first = client.responses.create(model="fake", input="hello", tools=[mcp_tool(mcp_server, allowed_tools=["add"])])  # type: ignore[list-item]
    assert [tool.name for tool in first.output[0].tools] == ["add"]
    wider = [mcp_tool(mcp_server, allowed_tools={"tool_names": ["add", "note"]})]
    second = client.responses.create(model="fake", input="hi", tools=wider, previous_response_id=first.id)  # type: ignore[arg-type]
    assert [item.type for item in second.output] == ["mcp_list_tools", "message"]
    assert sorted(tool.name for tool in second.output[0].tools) == ["add", "note"]
    assert mcp_server.methods["tools/list"] == 2
    narrower = [mcp_tool(mcp_server, allowed_tools=["note"])]
    third = client.responses.create(model="fake", input="again", tools=narrower, previous_response_id=second.id)  # type: ignore[arg-type]
    assert [item.type for item in third.output] == ["message"] and mcp_server.methods["tools/list"] == 2
    assert {tool["function"]["name"] for tool in fake.requests()[-1]["tools"]} == {"note"}


def test_a_call_waits_for_approval_and_the_approved_call_runs_its_stored_arguments(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server, require_approval=None)]  # omitted: always, as OpenAI
    text = script(tool_calls=[call("note", text="buy milk")], then={"text": "Noted."})
    asked = client.responses.create(model="fake", input=text, tools=tools)  # type: ignore[arg-type]
    assert asked.status == "completed"
    assert [item.type for item in asked.output] == ["mcp_list_tools", "mcp_approval_request"]
    request = asked.output[1]
    assert isinstance(request, McpApprovalRequest)
    assert (request.name, json.loads(request.arguments)) == ("note", {"text": "buy milk"})
    assert mcp_server.started["note"] == 0
    runtime_requests = len(fake.requests())
    approval = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    approved = client.responses.create(model="fake", input=[approval], tools=tools, previous_response_id=asked.id)  # type: ignore[arg-type, list-item]
    assert [item.type for item in approved.output] == ["mcp_call", "message"]
    made = approved.output[0]
    assert made.approval_request_id == request.id and made.output == "noted: buy milk"
    assert mcp_server.notes == ["buy milk"]
    # No inference to find the call again: the one request after the approval sees its result.
    later = fake.requests()[runtime_requests:]
    assert len(later) == 1 and later[0]["messages"][-1]["content"] == "noted: buy milk"
    assert approved.output[1].content[0].text == "Noted."


def test_a_refused_approval_runs_nothing_and_tells_the_model(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server, require_approval="always")]
    text = script(tool_calls=[call("note", text="sell the car")], then={"text": "Understood."})
    asked = client.responses.create(model="fake", input=text, tools=tools)  # type: ignore[arg-type]
    refusal = {
        "type": "mcp_approval_response",
        "approval_request_id": asked.output[1].id,
        "approve": False,
        "reason": "not today",
    }
    refused = client.responses.create(model="fake", input=[refusal], tools=tools, previous_response_id=asked.id)  # type: ignore[arg-type, list-item]
    assert [item.type for item in refused.output] == ["message"]
    assert mcp_server.started["note"] == 0
    told = fake.requests()[-1]["messages"][-1]
    assert told["role"] == "tool" and told["content"] == "The user did not approve this call: not today"


def test_approval_filters_pick_which_calls_wait(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server, require_approval={"never": {"read_only": True}})]
    text = script(tool_calls=[call("add", a=1, b=2), call("note", text="x")], then={"text": "ok"})
    response = client.responses.create(model="fake", input=text, tools=tools)  # type: ignore[arg-type]
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "mcp_approval_request"]
    assert mcp_server.calls["add"] == 1 and mcp_server.started["note"] == 0


def test_a_tool_that_fails_is_an_error_on_its_item_and_the_loop_goes_on(
    server: Server, api_key: str, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    text = script(tool_calls=[call("fail", reason="broken")], then={"text": "It failed."})
    events = sse(server, api_key, {"model": "fake", "input": text, "tools": [mcp_tool(mcp_server)]})
    assert "response.mcp_call.failed" in kinds(events) and "response.mcp_call.completed" not in kinds(events)
    failed = next(
        e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "mcp_call"
    )
    assert failed["status"] == "failed" and failed["output"] is None
    assert failed["error"]["type"] == "mcp_tool_execution_error"
    assert events[-1]["type"] == "response.completed"
    assert fake.requests()[-1]["messages"][-1]["content"].startswith("The tool call failed:")


def test_an_mcp_server_that_is_down_fails_the_list_and_the_response(
    client: openai.OpenAI, server: Server, api_key: str, fake: FakeRuntime
) -> None:
    tool = {"type": "mcp", "server_label": "gone", "server_url": "http://127.0.0.1:9/mcp", "require_approval": "never"}
    events = sse(server, api_key, {"model": "fake", "input": "hi", "tools": [tool]})
    assert kinds(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
        "response.output_item.done",
        "response.failed",
    ]
    item = events[5]["item"]
    assert item["error"].startswith("Error retrieving tool list from MCP server 'gone'")
    failed = events[-1]["response"]
    assert failed["error"]["code"] == "http_error" and failed["output"] == [item]
    assert fake.requests() == []  # the model is not asked without its tools


@pytest.mark.parametrize(
    ("path", "said"),
    [("/refuses", "HTTP 401"), ("/garbage", "Failed to parse JSON"), ("/redirects", "Redirect to http://127.0.0.2")],
)
def test_a_server_that_refuses_answers_garbage_or_redirects_away_fails_the_list_clearly(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer, path: str, said: str
) -> None:
    tool = mcp_tool(mcp_server, server_url=f"http://127.0.0.1:{mcp_server.port}{path}")
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="fake", input="hi", tools=[tool])  # type: ignore[list-item]
    assert refused.value.status_code == 424
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "external_connector_error" and error["param"] == "tools"
    assert (
        error["message"].startswith("Error retrieving tool list from MCP server 'tools': ") and said in error["message"]
    )
    assert fake.requests() == []


def test_an_mcp_server_at_a_private_address_is_not_connected_to(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tool = mcp_tool(mcp_server, server_url=mcp_server.url.replace("127.0.0.1", "127.0.0.2"))
    with pytest.raises(openai.APIStatusError) as refused:  # OpenAI's answer to a list that failed
        client.responses.create(model="fake", input="hi", tools=[tool])  # type: ignore[list-item]
    assert refused.value.status_code == 424
    error = refused.value.body
    assert isinstance(error, dict) and (error["type"], error["param"], error["code"]) == (
        "external_connector_error",
        "tools",
        "http_error",
    )
    assert "does not connect to" in error["message"] and "127.0.0.2" in error["message"]
    assert mcp_server.headers == []


def test_two_servers_in_one_loop_with_a_client_function(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    other = McpTestServer(transport="sse").start()  # the older transport, as a fallback
    try:
        tools = [
            mcp_tool(mcp_server, "first"),
            mcp_tool(other, "second", allowed_tools=["note"]),
            {"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}},
        ]
        text = script(
            tool_calls=[call("add", a=1, b=1)],
            then={"tool_calls": [call("second__note", text="two")], "then": {"tool_calls": [call("weather")]}},
        )
        response = client.responses.create(model="fake", input=text, tools=tools)  # type: ignore[arg-type]
        assert [(item.type, getattr(item, "server_label", None)) for item in response.output] == [
            ("mcp_list_tools", "first"),
            ("mcp_list_tools", "second"),
            ("mcp_call", "first"),
            ("mcp_call", "second"),
            ("function_call", None),
        ]
        assert [tool.name for tool in response.output[1].tools] == ["note"]
        assert mcp_server.calls["add"] == 1 and other.calls["note"] == 1 and mcp_server.calls["note"] == 0
        # Both servers have a `note`: the second server's is offered under its label.
        offered = {tool["function"]["name"] for tool in fake.requests()[0]["tools"]}
        assert offered == {"add", "note", "fail", "slow", "slow_note", "big", "second__note", "weather"}
    finally:
        other.stop()


def test_max_tool_calls_counts_mcp_calls_only(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server), {"type": "function", "name": "weather"}]
    text = script(
        tool_calls=[call("add", a=1, b=1), call("add", a=2, b=2)],
        then={"tool_calls": [call("add", a=3, b=3), call("weather"), call("weather")]},
    )
    response = client.responses.create(model="fake", input=text, tools=tools, max_tool_calls=1)  # type: ignore[arg-type]
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call", "function_call", "function_call"]
    assert mcp_server.calls["add"] == 1
    assert "add" not in {tool["function"]["name"] for tool in fake.requests()[-1]["tools"]}


def test_a_large_output_is_cut_and_marked(client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer) -> None:
    text = script(tool_calls=[call("big", size=3 * 1024 * 1024)], then={"text": "big"})
    response = client.responses.create(model="fake", input=text, tools=[mcp_tool(mcp_server)])  # type: ignore[list-item]
    output = response.output[1].output
    assert output.endswith(f"[output truncated: {1024 * 1024} of {3 * 1024 * 1024} bytes]")
    assert response.status == "completed"


def test_a_loop_that_never_answers_ends_incomplete_at_its_rounds(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    forever = {"tool_calls": [call("add", a=1, b=1)]}
    text = script(**forever, then=forever)
    response = client.responses.create(model="fake", input=text, tools=[mcp_tool(mcp_server)])  # type: ignore[list-item]
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_tool_rounds"  # type: ignore[comparison-overlap]
    assert mcp_server.calls["add"] == 10 and len(fake.requests()) == 10


def test_cancel_during_a_slow_call_keeps_what_was_committed(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    text = script(tool_calls=[call("slow", seconds=30)], then={"text": "done"})
    response = client.responses.create(model="fake", input=text, tools=[mcp_tool(mcp_server)], background=True)  # type: ignore[list-item]
    wait_until(lambda: mcp_server.started["slow"] == 1, timeout=10)
    cancelled = client.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
    stored = client.responses.retrieve(response.id)
    assert [item.type for item in stored.output] == ["mcp_list_tools", "mcp_call"]
    assert stored.output[1].status == "incomplete" and mcp_server.calls["slow"] == 0


def test_store_false_clients_replay_mcp_items(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tools = [mcp_tool(mcp_server)]
    text = script(tool_calls=[call("add", a=2, b=2)], then={"text": "4."})
    first = client.responses.create(model="fake", input=text, tools=tools, store=False)  # type: ignore[arg-type]
    replayed = [*[{"role": "user", "content": text}], *[item.model_dump(exclude_none=True) for item in first.output]]
    follow_up = [*replayed, {"role": "user", "content": "And again?"}]
    second = client.responses.create(model="fake", input=follow_up, tools=tools, store=False)  # type: ignore[arg-type]
    assert [item.type for item in second.output] == ["message"]  # the replayed list is used: none again
    assert mcp_server.methods["tools/list"] == 1
    messages = fake.requests()[-1]["messages"]
    [asked] = [message for message in messages if message.get("tool_calls")]
    assert asked["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 2}'}
    answered = messages[messages.index(asked) + 1]
    assert answered == {"role": "tool", "tool_call_id": asked["tool_calls"][0]["id"], "content": "4"}


def test_turned_off_an_mcp_tool_is_echoed_redacted_and_never_offered(
    environment: Environment, api_key: str, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    with api_client(environment, api_key, RESPONSES_MCP="off") as off:
        tool = mcp_tool(mcp_server, authorization=TOKEN)
        response = off.responses.create(model="fake", input="hi", tools=[tool])  # type: ignore[list-item]
    assert response.output_text == "Echo: hi"
    assert response.model_dump()["tools"][0]["authorization"] == "<redacted>"
    assert "tools" not in fake.requests()[0] and mcp_server.headers == []


def test_only_listed_mcp_servers_are_allowed_when_the_operator_lists_them(
    environment: Environment, api_key: str, mcp_server: McpTestServer
) -> None:
    with api_client(environment, api_key, RESPONSES_MCP_SERVER_URLS="https://tools.internal/") as listed:
        with pytest.raises(openai.BadRequestError) as refused:
            listed.responses.create(model="fake", input="hi", tools=[mcp_tool(mcp_server)])  # type: ignore[list-item]
    assert (refused.value.body["param"], refused.value.body["code"]) == (
        "tools[0].server_url",
        "mcp_server_not_allowed",
    )


def test_credentials_need_an_encryption_key_to_travel(
    environment: Environment, api_key: str, mcp_server: McpTestServer
) -> None:
    with api_client(environment, api_key, RESPONSES_ENCRYPTION_KEYS="") as keyless:
        with pytest.raises(openai.BadRequestError) as refused:
            keyless.responses.create(model="fake", input="hi", tools=[mcp_tool(mcp_server, authorization=TOKEN)])  # type: ignore[list-item]
        assert refused.value.body["code"] == "mcp_credentials_unavailable"
        # Without credentials the tool runs all the same.
        assert keyless.responses.create(model="fake", input="hi", tools=[mcp_tool(mcp_server)]).status == "completed"  # type: ignore[list-item]


@pytest.mark.parametrize("approval", ["never", "always"])
def test_the_agents_sdk_runs_an_agent_with_a_hosted_mcp_tool(
    server: Server, api_key: str, fake: FakeRuntime, mcp_server: McpTestServer, approval: str
) -> None:
    asked: list[str] = []

    def approve(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request.data.name)
        return {"approve": True}

    config: Any = {"type": "mcp", "server_label": "tools", "server_url": mcp_server.url, "require_approval": approval}
    tool = HostedMCPTool(tool_config=config, on_approval_request=approve)
    model = OpenAIResponsesModel(
        model="fake", openai_client=AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    )
    agent = Agent(name="assistant", instructions="Use the tools.", tools=[tool], model=model)
    text = script(tool_calls=[call("note", text="from the agent")], then={"text": "Noted it."})
    result = asyncio.run(Runner.run(agent, text))
    assert result.final_output == "Noted it."
    assert mcp_server.notes == ["from the agent"]  # made once, by the server
    assert asked == ([] if approval == "never" else ["note"])


def test_an_approval_in_a_conversation_runs_the_stored_call(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    conversation = client.conversations.create()
    tools = [mcp_tool(mcp_server, require_approval="always")]
    text = script(tool_calls=[call("note", text="in a conversation")], then={"text": "Done."})
    asked = client.responses.create(model="fake", input=text, tools=tools, conversation=conversation.id)  # type: ignore[arg-type]
    request = asked.output[1]
    assert request.type == "mcp_approval_request"
    approval: Any = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    approved = client.responses.create(model="fake", input=[approval], tools=tools, conversation=conversation.id)  # type: ignore[arg-type]
    assert [item.type for item in approved.output] == ["mcp_call", "message"]
    assert mcp_server.notes == ["in a conversation"]
    kinds_listed = [item.type for item in client.conversations.items.list(conversation.id, order="asc").data]
    assert kinds_listed == [
        "message",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "message",
    ]
    # The same approval again, now stale: a 400 naming it, in the conversation and after the chain.
    for where in ({"conversation": conversation.id}, {"previous_response_id": approved.id}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="fake", input=[approval], tools=tools, **where)  # type: ignore[call-overload]
        assert refused.value.body["param"] == "input[0].approval_request_id"
    assert mcp_server.notes == ["in a conversation"]


def test_tool_choice_names_an_mcp_tool_for_the_first_answer_only(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    text = script(tool_calls=[call("add", a=3, b=4)], then={"text": "7."})
    choice: Any = {"type": "mcp", "server_label": "tools", "name": "add"}
    response = client.responses.create(model="fake", input=text, tools=[mcp_tool(mcp_server)], tool_choice=choice)  # type: ignore[list-item]
    assert response.output_text == "7." and response.model_dump()["tool_choice"] == {**choice}
    first, second = fake.requests()
    assert first["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert second["tool_choice"] == "auto"  # (forced again, it would be called again and again)
    anyone: Any = {"type": "mcp", "server_label": "tools"}
    client.responses.create(model="fake", input=text, tools=[mcp_tool(mcp_server)], tool_choice=anyone)  # type: ignore[list-item]
    assert fake.requests()[2]["tool_choice"] == "required"


def test_a_background_loop_resumes_mid_call_and_its_webhook_fires_at_its_end(
    environment: Environment, server: Server, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    """A stream cut while a call runs is resumed from its last event, by number, and gets the rest
    of the loop as the first stream got it; the account's endpoint hears the end once."""
    account = f"mcp-hooks-{secrets.token_hex(3)}"
    key = create_key(environment, account)
    receiver = Receiver().start()
    try:
        added = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli",
                "webhooks",
                "add",
                account,
                receiver.url,
                "--events",
                "response.completed",
            ],
            cwd=ROOT,
            env=environment.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert added.returncode == 0, added.stderr
        seen = slow_loop_until_its_call(server, key, mcp_server, seconds=1.5)
        response_id, cut = seen[0]["response"]["id"], seen[-1]["sequence_number"]
        assert mcp_server.calls["slow"] == 0  # (it takes 1.5 s)
        resumed = resume(server, key, response_id, cut)  # while the call runs
        assert mcp_server.calls["slow"] == 1 and resumed[-1]["type"] == "response.completed"
        whole = resume(server, key, response_id, -1)  # the log, once it has ended
        assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
        assert unpadded(seen) == unpadded(whole[: cut + 1]) and unpadded(resumed) == unpadded(whole[cut + 1 :])
        assert "mcp_call" in [e["item"]["type"] for e in resumed if e["type"] == "response.output_item.done"]
        [received] = receiver.wait_for(1)
        hook = json.loads(received.body)
        assert (hook["type"], hook["data"]["id"]) == ("response.completed", response_id)
        assert mcp_server.calls["slow"] == 1
    finally:
        receiver.stop()


def test_a_follower_on_another_replica_follows_a_loop_in_the_middle_of_a_call(
    environment: Environment, server: Server, api_key: str, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    """A loop created through one API replica is followed, from the event its first client last
    saw, through another (no state in the API process): the rest of the loop, numbered on."""
    seen = slow_loop_until_its_call(server, api_key, mcp_server, seconds=4)
    response_id, cut = seen[0]["response"]["id"], seen[-1]["sequence_number"]
    with api_client(environment, api_key) as other:  # another replica, started now
        assert mcp_server.calls["slow"] == 0  # (the call is still being made)
        resumed = resume(str(other.base_url), api_key, response_id, cut)
    assert [e["sequence_number"] for e in resumed] == list(range(cut + 1, cut + 1 + len(resumed)))
    assert resumed[-1]["type"] == "response.completed" and mcp_server.calls["slow"] == 1
    assert resumed[-1]["response"]["output"][-1]["content"][0]["text"] == "after the wait"
    assert unpadded(seen + resumed) == unpadded(resume(server, api_key, response_id, -1))


def slow_loop_until_its_call(server: Server, key: str, mcp_server: McpTestServer, seconds: float) -> list[Any]:
    """The first stream of a background loop whose one call takes `seconds`, cut once the call is
    being made (a background loop goes on)."""
    body = {
        "model": "fake",
        "input": script(tool_calls=[call("slow", seconds=seconds)], then={"text": "after the wait"}),
        "tools": [mcp_tool(mcp_server)],
        "background": True,
        "stream": True,
    }
    seen = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, headers=headers) as first:
        for line in first.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[len("data: ") :]))
                if seen[-1]["type"] == "response.mcp_call.in_progress":
                    return seen
    raise AssertionError("the stream ended before its call began")


def unpadded(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events without their obfuscation padding, which each stream draws afresh."""
    return [{k: v for k, v in event.items() if k != "obfuscation"} for event in events]


def resume(server: Server | str, key: str, response_id: str, after: int) -> list[dict[str, Any]]:
    """The response's events after `after`, followed to its end, from `server` (or a base URL)."""
    events = []
    base_url = server if isinstance(server, str) else server.base_url
    url = f"{base_url.rstrip('/')}/responses/{response_id}"
    params: dict[str, str | int] = {"stream": "true", "starting_after": after}
    with httpx.stream("GET", url, params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30) as answer:
        assert answer.status_code == 200, answer.read().decode()
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events


def test_a_deferred_server_is_loaded_by_a_tool_search_and_then_called(
    client: openai.OpenAI, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    """Its tools are listed but not offered until the server's tool search loads the server by what
    they do; then the model calls one and the server runs it."""
    tools: Any = [mcp_tool(mcp_server, "maths", defer_loading=True), {"type": "tool_search"}]
    text = script(
        tool_calls=[call("tool_search", query="add two integers")],
        then={"tool_calls": [call("add", a=2, b=3)], "then": {"text": "Five."}},
    )
    response = client.responses.create(model="fake", input=text, tools=tools)
    assert [item.type for item in response.output] == [
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]
    loaded = response.output[2].model_dump()["tools"]
    assert [(tool["type"], tool["server_label"]) for tool in loaded] == [("mcp", "maths")]
    assert response.output[3].output == "5" and mcp_server.calls["add"] == 1
    first, second, _ = fake.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["tool_search"]  # listed, not offered
    assert "add" in [t["function"]["name"] for t in second["tools"]]

"""Both Agents SDKs' tool search (the server's) with a deferred function tool, against real
processes (Python's over HTTP and the WebSocket mode, JavaScript's over the WebSocket mode): the
model searches, the server loads the function, the model calls it, the SDK runs it, and the
answer uses what it returned."""

from __future__ import annotations

import json

import pytest
from agents import (
    Agent,
    Runner,
    ToolSearchTool,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.conftest import FakeRuntime, Server
from tests.e2e.agent_sdks import responses_model, run_js_agent

set_tracing_disabled(True)  # the SDK would export traces to OpenAI

SEARCH = {"id": "call_search", "name": "tool_search", "arguments": json.dumps({"query": "weather forecast"})}
WEATHER = {"id": "call_weather", "name": "get_weather", "arguments": json.dumps({"city": "Lisbon"})}
PROMPT = "#fake " + json.dumps(
    {"tool_calls": [SEARCH], "then": {"tool_calls": [WEATHER], "then": {"text": "Sunny in Lisbon."}}}
)


@function_tool(defer_loading=True)
def get_weather(city: str) -> str:
    """The weather forecast for a city."""
    return f"Sunny in {city}, 24 degrees."


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_the_agents_sdk_tool_search_loads_a_deferred_function_it_then_runs(
    server: Server, api_key: str, fake: FakeRuntime, transport: str
) -> None:
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    async with responses_model(client, transport) as model:
        agent = Agent(name="assistant", instructions="Use tools.", tools=[get_weather, ToolSearchTool()], model=model)
        result = await Runner.run(agent, PROMPT)
    assert result.final_output == "Sunny in Lisbon."
    first, second, third = fake.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["tool_search"]  # get_weather deferred
    assert [t["function"]["name"] for t in second["tools"]] == ["tool_search", "get_weather"]
    told = third["messages"][-1]
    assert told["role"] == "tool" and told["content"] == "Sunny in Lisbon, 24 degrees."


def test_the_js_agents_sdk_tool_search_loads_a_deferred_function_it_then_runs(
    server: Server, api_key: str, fake: FakeRuntime
) -> None:
    result = run_js_agent("tool_search_agent.mjs", PROMPT, server.base_url, api_key)
    assert result["final_output"] == "Sunny in Lisbon."
    told = fake.requests()[-1]["messages"][-1]
    assert told["role"] == "tool" and told["content"] == "Sunny in Lisbon, 24 degrees."

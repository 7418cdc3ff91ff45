"""The OpenAI Agents SDK (`openai-agents`) runs its agent loop against the server: two tools
called, their results sent back with `previous_response_id`, then the answer; streamed and not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.conftest import Environment, FakeRuntime, Server

set_tracing_disabled(True)  # the SDK would export traces to OpenAI


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


@function_tool
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}"


CALLS = [
    {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    {"name": "get_time", "arguments": json.dumps({"city": "Paris"})},
]
PROMPT = "#fake " + json.dumps({"tool_calls": CALLS, "then": {"text": "Sunny, and it is noon."}})


@pytest.fixture
def agent(server: Server, api_key: str) -> Iterator[Agent[None]]:
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    model = OpenAIResponsesModel(model="fake", openai_client=client)
    yield Agent(name="assistant", instructions="Use the tools.", tools=[get_weather, get_time], model=model)


async def assert_the_loop_ran(
    fake: FakeRuntime, environment: Environment, answer: str, last_response_id: str | None
) -> None:
    assert answer == "Sunny, and it is noon."
    first, second = fake.requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather", "get_time"]
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert [r["content"] for r in results] == ["Sunny in Paris", "12:00 in Paris"]
    # The second turn continued the first by previous_response_id: only the tools' results were sent.
    sql = "SELECT previous_response_id FROM responses WHERE id = $1"
    [row] = await asyncio.to_thread(environment.query, sql, last_response_id)
    assert row["previous_response_id"] is not None


async def test_an_agent_loop_with_two_tools(agent: Agent[None], fake: FakeRuntime, environment: Environment) -> None:
    result = await Runner.run(agent, PROMPT, auto_previous_response_id=True)
    await assert_the_loop_ran(fake, environment, result.final_output, result.last_response_id)


async def test_an_agent_loop_with_two_tools_streamed(
    agent: Agent[None], fake: FakeRuntime, environment: Environment
) -> None:
    result = Runner.run_streamed(agent, PROMPT, auto_previous_response_id=True)
    kinds = [event.type async for event in result.stream_events()]
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    await assert_the_loop_ran(fake, environment, result.final_output, result.last_response_id)

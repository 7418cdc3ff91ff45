"""The OpenAI Agents SDK (`openai-agents`) runs its agent loop against the server: two tools
called, their results sent back with `previous_response_id`, then the answer; streamed and not.
And its state kept server-side, in a conversation: by `conversation_id`, and in an
`OpenAIConversationsSession`, each over three turns with a tool; and a session compacted by the
server (`OpenAIResponsesCompactionSession`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIConversationsSession,
    OpenAIResponsesCompactionSession,
    OpenAIResponsesModel,
    OpenAIResponsesWSModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
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


@pytest.mark.parametrize("chained", [True, False])
async def test_an_agent_loop_over_the_websocket_transport(
    server: Server, api_key: str, fake: FakeRuntime, environment: Environment, chained: bool
) -> None:
    """The SDK's websocket transport: one socket for the loop's model calls, each a response.create
    (chained by previous_response_id, or, the SDK's default, the whole history each time)."""
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    model = OpenAIResponsesWSModel(model="fake", openai_client=client)
    agent = Agent(name="assistant", instructions="Use the tools.", tools=[get_weather, get_time], model=model)
    try:
        result = await Runner.run(agent, PROMPT, auto_previous_response_id=chained)
    finally:
        await model.close()
    assert result.final_output == "Sunny, and it is noon."
    _, second = fake.requests()
    assert [r["content"] for r in second["messages"] if r["role"] == "tool"] == ["Sunny in Paris", "12:00 in Paris"]
    sql = "SELECT previous_response_id FROM responses WHERE id = $1"
    [row] = await asyncio.to_thread(environment.query, sql, result.last_response_id)
    assert (row["previous_response_id"] is not None) == chained


def turn(n: int) -> str:
    """Turn n of a conversation: a tool call, then an answer naming the turn."""
    call = {"name": "get_weather", "arguments": json.dumps({"city": f"City{n}"}), "id": f"call_turn{n}"}
    return "#fake " + json.dumps({"tool_calls": [call], "then": {"text": f"Answer {n}."}})


async def test_an_agent_keeps_its_state_in_a_conversation_by_conversation_id(
    agent: Agent[None], fake: FakeRuntime, server: Server, api_key: str
) -> None:
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    conversation = await client.conversations.create()
    for n in range(3):
        result = await Runner.run(agent, turn(n), conversation_id=conversation.id)
        assert result.final_output == f"Answer {n}."
    # The last request held every earlier turn: each question, its call, its result, its answer.
    messages = fake.requests()[-1]["messages"]
    assert [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")] == [
        "Answer 0.",
        "Answer 1.",
    ]
    assert [m["content"] for m in messages if m["role"] == "tool"] == [
        "Sunny in City0",
        "Sunny in City1",
        "Sunny in City2",
    ]
    kinds = [item.type async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert kinds == ["message", "function_call", "function_call_output", "message"] * 3


async def test_an_agent_keeps_its_state_in_an_openai_conversations_session(
    agent: Agent[None], fake: FakeRuntime, server: Server, api_key: str
) -> None:
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    session = OpenAIConversationsSession(openai_client=client)
    for n in range(3):
        result = await Runner.run(agent, turn(n), session=session)
        assert result.final_output == f"Answer {n}."
    history: list[Any] = await session.get_items()
    answers = [part["text"] for item in history if item.get("role") == "assistant" for part in item["content"]]
    assert answers == ["Answer 0.", "Answer 1.", "Answer 2."]
    # Each run sent the session's history, kept in the conversation on this server.
    messages = fake.requests()[-1]["messages"]
    assert [m["content"] for m in messages if m["role"] == "tool"] == [
        "Sunny in City0",
        "Sunny in City1",
        "Sunny in City2",
    ]
    assert await session.pop_item() is not None  # the session's own edits go through the items routes too
    assert len(await session.get_items()) == len(history) - 1
    await session.clear_session()
    assert await session.get_items() == []


async def test_an_agent_session_is_compacted_by_the_server(fake: FakeRuntime, server: Server, api_key: str) -> None:
    client = AsyncOpenAI(base_url=server.base_url, api_key=api_key, max_retries=0)
    agent = Agent(
        name="planner", instructions="Plan trips.", model=OpenAIResponsesModel(model="fake", openai_client=client)
    )
    session = OpenAIResponsesCompactionSession(
        "trip",
        SQLiteSession("trip"),
        client=client,
        model="gpt-4.1",  # (an alias of the fake model: the session wants an OpenAI model's name)
        should_trigger_compaction=lambda context: True,  # after every turn
    )
    for question in ("Plan a trip to Lisbon.", "In May.", "Book it."):
        result = await Runner.run(agent, question, session=session)
        assert result.final_output == f"Echo: {question}"
    history: list[Any] = await session.get_items()
    assert [item.get("type", "message") for item in history] == ["message", "message", "message", "compaction"]
    assert [item["content"][0]["text"] for item in history[:3]] == ["Plan a trip to Lisbon.", "In May.", "Book it."]
    # The last turn was sent the user's words and the summary, not the earlier answers.
    messages = fake.requests()[-2]["messages"]  # (the last request is the compaction after it)
    assert [m["role"] for m in messages] == ["system", "user", "user", "user", "user"]
    assert messages[3]["content"].startswith("What came before in this conversation, summarized:")

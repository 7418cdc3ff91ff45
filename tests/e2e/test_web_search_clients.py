"""Clients that search the web, against real processes and the SearXNG stand-in: the Agents
SDK's WebSearchTool (over HTTP and the WebSocket mode), and Codex, whose default request carries
`{"type": "web_search", "external_web_access": false}`: each gets the search run by the server,
its `web_search_call` and the answer's `url_citation`."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import Agent, Runner, WebSearchTool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.conftest import Environment, FakeRuntime, Server, processes_serving
from tests.e2e.agent_sdks import responses_model
from tests.e2e.test_agent_clients import CODEX_MISSING, codex_exec
from tests.searxng_stand_in import SearxngStandIn

set_tracing_disabled(True)  # the SDK would export traces to OpenAI

ANSWER = {"chunks": ["The docs are online", "【1】", "."]}
PROMPT = "#fake " + json.dumps(
    {"tool_calls": [{"name": "web_search", "arguments": json.dumps({"query": "python docs"})}], "then": ANSWER}
)


@pytest.fixture(scope="module")
def web_server(environment: Environment, searxng: SearxngStandIn) -> Iterator[Server]:
    # A queue of its own: the session's worker, which searches nothing, must not take its responses.
    queue = f"responses:web:{secrets.token_hex(4)}"
    with processes_serving(environment, RESPONSES_WEB_SEARCH_URL=searxng.url, RESPONSES_QUEUE=queue) as served:
        yield served


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_the_agents_sdk_web_search_tool_is_run_by_the_server(
    web_server: Server, api_key: str, fake: FakeRuntime, searxng: SearxngStandIn, transport: str
) -> None:
    client = AsyncOpenAI(base_url=web_server.base_url, api_key=api_key, max_retries=0)
    async with responses_model(client, transport) as model:
        tool = WebSearchTool(search_context_size="low", filters=None)
        agent = Agent(name="assistant", instructions="Search when unsure.", tools=[tool], model=model)
        result = await Runner.run(agent, PROMPT)
    assert result.final_output == "The docs are online."
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert [getattr(call, "type", None) for call in calls] == ["web_search_call"]
    assert calls[0].action.type == "search" and calls[0].action.query == "python docs"
    message = next(item.raw_item for item in result.new_items if item.type == "message_output_item")
    [annotation] = message.content[0].annotations
    assert annotation.type == "url_citation" and annotation.url == "https://docs.python.org/0"
    assert (annotation.start_index, annotation.end_index) == (0, 19)
    assert searxng.queries[-1] == "python docs"
    assert fake.requests()[-1]["messages"][-1]["content"].count("<result ") == 3  # low


@pytest.mark.skipif(shutil.which("codex") is None, reason=CODEX_MISSING)
def test_codex_s_default_web_search_is_run_by_the_server(
    web_server: Server, api_key: str, fake: FakeRuntime, searxng: SearxngStandIn, tmp_path: Path
) -> None:
    output = codex_exec(web_server.base_url, api_key, tmp_path, PROMPT)
    assert "The docs are online." in output
    first, second = fake.requests()
    assert "web_search" in [tool["function"]["name"] for tool in first["tools"]]
    assert (
        second["messages"][-1]["role"] == "tool" and "Passage 0 about python docs" in second["messages"][-1]["content"]
    )
    assert searxng.queries[-1] == "python docs"

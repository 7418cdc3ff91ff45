"""Clients that use documents, against real processes on a PostgreSQL with pgvector: the OpenAI
SDKs' helpers (Python: upload_and_poll, file_batches.upload_and_poll, search; and JavaScript's),
and both Agents SDKs' file search tool (Python over HTTP and the WebSocket mode, JavaScript over
the WebSocket mode), its search run by the server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from agents import Agent, FileSearchTool, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from tests.conftest import Environment, FakeRuntime, Server, key_of, processes_serving
from tests.e2e.agent_sdks import responses_model, run_js_agent

set_tracing_disabled(True)  # the SDK would export traces to OpenAI


ANSWER = {"chunks": ["Thirty days of vacation", "【1】", "."]}
PROMPT = "#fake " + json.dumps(
    {"tool_calls": [{"name": "file_search", "arguments": json.dumps({"queries": ["vacation"]})}], "then": ANSWER}
)


@pytest.fixture(scope="module")
def vector_server(vector_environment: Environment) -> Iterator[Server]:
    with processes_serving(vector_environment) as served:
        yield served


@pytest.fixture(scope="module")
def documents(
    vector_server: Server, vector_environment: Environment, account_name: str, keys_made: dict[tuple[str, str], str]
) -> tuple[str, str]:
    """An API key, and a vector store of its account holding two ingested files."""
    key = key_of(keys_made, vector_environment, account_name)
    client = openai.OpenAI(base_url=vector_server.base_url, api_key=key, max_retries=0, timeout=60)
    store = client.vector_stores.create(name="handbook")
    batch = client.vector_stores.file_batches.upload_and_poll(
        store.id,
        files=[
            ("vacation.txt", b"Every employee receives thirty days of paid vacation per year."),
            ("remote.txt", b"Employees may work from home on Mondays and Fridays."),
        ],
        poll_interval_ms=200,
    )
    assert (batch.file_counts.completed, batch.file_counts.in_progress) == (2, 0)
    found = client.vector_stores.search(store.id, query="working from home")
    assert found.data[0].filename == "remote.txt"
    return key, store.id


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_the_agents_sdk_file_search_tool_is_run_by_the_server(
    vector_server: Server, documents: tuple[str, str], fake: FakeRuntime, transport: str
) -> None:
    key, store_id = documents
    client = AsyncOpenAI(base_url=vector_server.base_url, api_key=key, max_retries=0)
    async with responses_model(client, transport) as model:
        tool = FileSearchTool(vector_store_ids=[store_id], max_num_results=2, include_search_results=True)
        agent = Agent(name="assistant", instructions="Answer from the files.", tools=[tool], model=model)
        result = await Runner.run(agent, PROMPT)
    assert result.final_output == "Thirty days of vacation."
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert [getattr(call, "type", None) for call in calls] == ["file_search_call"]
    search = calls[0]
    assert search.queries == ["vacation"] and search.results and search.results[0].filename == "vacation.txt"
    message = next(item.raw_item for item in result.new_items if item.type == "message_output_item")
    [annotation] = message.content[0].annotations
    assert (annotation.type, annotation.filename, annotation.index) == ("file_citation", "vacation.txt", 23)
    result_text = fake.requests()[-1]["messages"][-1]["content"]
    assert "thirty days of paid vacation" in result_text


def test_the_js_sdks_helpers_and_the_js_agents_file_search_tool(
    vector_server: Server,
    vector_environment: Environment,
    account_name: str,
    keys_made: dict[tuple[str, str], str],
    fake: FakeRuntime,
) -> None:
    """The OpenAI SDK for JavaScript (uploadAndPoll, fileBatches.uploadAndPoll, search) and the
    Agents SDK for JavaScript's fileSearchTool over WebSocket mode (tests/e2e/agents_js)."""
    key = key_of(keys_made, vector_environment, account_name)
    result = run_js_agent("documents_agent.mjs", PROMPT, vector_server.base_url, key)
    assert result["uploaded"] == "completed"
    assert result["batch_counts"]["completed"] == 1 and result["batch_counts"]["in_progress"] == 0
    assert result["hits"][0] == "remote.txt"
    assert result["final_output"] == "Thirty days of vacation."
    [search] = result["searches"]
    assert search["queries"] == ["vacation"] and search["results"][0]["filename"] == "vacation.txt"
    [annotation] = result["annotations"]
    assert (annotation["type"], annotation["filename"], annotation["index"]) == ("file_citation", "vacation.txt", 23)

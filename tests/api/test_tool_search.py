"""`tool_search` and deferred tools: a deferred function or namespace is not offered until a tool
search loads it; in server execution the server searches the deferred tools for the model's query
and the matches are offered from the model's next answer on, after every other tool (a
`tool_search_call` and a `tool_search_output`, stored and read again by later turns); in client
execution the model's call comes back for the client, whose `tool_search_output` loads the tools it
names; and bad input is refused naming it."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import FakeRuntime


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


SEARCH: Any = {"type": "tool_search"}
TOOLS: Any = [
    {"type": "function", "name": "add", "description": "Add two numbers.", "parameters": {"type": "object"}},
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "defer_loading": True,
    },
    {
        "type": "namespace",
        "name": "crm",
        "description": "Customer records.",
        "tools": [
            {
                "type": "function",
                "name": "find_customer",
                "description": "Find a customer by name.",
                "defer_loading": True,
            },
            {"type": "function", "name": "count_customers", "description": "How many customers there are."},
        ],
    },
    SEARCH,
]


def test_the_server_loads_the_deferred_tool_the_model_searched_for(client: openai.OpenAI, fake: FakeRuntime) -> None:
    then = {"tool_calls": [{"name": "get_weather", "arguments": json.dumps({"city": "Lisbon"})}]}
    searching = [{"id": "call_search", "name": "tool_search", "arguments": json.dumps({"query": "weather forecast"})}]
    response = client.responses.create(model="fake", input=script(tool_calls=searching, then=then), tools=TOOLS)
    call, output, weather = response.output
    assert call.model_dump(exclude_none=True) == {
        "id": call.id,
        "type": "tool_search_call",
        "call_id": "call_search",
        "execution": "server",
        "arguments": {"query": "weather forecast"},
        "status": "completed",
    }
    assert output.type == "tool_search_output" and output.call_id == "call_search"
    assert [tool.name for tool in output.tools] == ["get_weather"]
    assert weather.type == "function_call" and weather.name == "get_weather"
    assert weather.namespace == "get_weather"  # (a loaded top-level function's, as OpenAI's)
    first, second = fake.requests()
    assert offered(first) == ["add", "crm__count_customers", "tool_search"]
    assert offered(second) == ["add", "crm__count_customers", "tool_search", "get_weather"]  # loaded last
    told = second["messages"][-1]
    assert told["role"] == "tool" and told["tool_call_id"] == "call_search" and "get_weather" in told["content"]
    described = next(t for t in first["tools"] if t["function"]["name"] == "tool_search")["function"]["description"]
    assert "get_weather" in described and "crm" in described

    output_item: Any = {"type": "function_call_output", "call_id": weather.call_id, "output": "Sunny."}
    client.responses.create(model="fake", input=[output_item], previous_response_id=response.id, tools=TOOLS)
    assert offered(fake.requests()[-1])[-1] == "get_weather"  # a later turn keeps what was loaded


def test_a_namespace_loads_whole_and_an_unmatched_search_loads_nothing(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    searching = [{"name": "tool_search", "arguments": json.dumps({"query": "find a customer"})}]
    response = client.responses.create(
        model="fake", input=script(tool_calls=searching, then={"text": "Ok."}), tools=TOOLS
    )
    loaded = response.output[1].model_dump()["tools"]
    assert [(tool["type"], tool["name"]) for tool in loaded] == [("namespace", "crm")]
    assert [member["name"] for member in loaded[0]["tools"]] == ["find_customer"]
    assert offered(fake.requests()[-1])[-1] == "crm__find_customer"
    nothing = [{"name": "tool_search", "arguments": json.dumps({"query": "zebra"})}]
    empty = client.responses.create(model="fake", input=script(tool_calls=nothing, then={"text": "Ok."}), tools=TOOLS)
    assert empty.output[1].model_dump()["tools"] == []
    assert fake.requests()[-1]["messages"][-1]["content"] == "No tool was found for that."


def test_in_client_execution_the_client_searches_and_its_output_loads_the_tools(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    tools: Any = [*TOOLS[:3], {"type": "tool_search", "execution": "client", "description": "Find tools."}]
    searching = [{"name": "tool_search", "arguments": json.dumps({"paths": ["get_quote"]})}]
    response = client.responses.create(model="fake", input=script(tool_calls=searching), tools=tools)
    [call] = response.output
    assert call.type == "tool_search_call" and call.execution == "client"
    assert call.arguments == {"paths": ["get_quote"]} and call.call_id
    function = next(t for t in fake.requests()[-1]["tools"] if t["function"]["name"] == "tool_search")["function"]
    assert function["description"] == "Find tools." and function["parameters"]["required"] == ["paths"]
    loaded: Any = {
        "type": "tool_search_output",
        "call_id": call.call_id,
        "execution": "client",
        "tools": [{"type": "function", "name": "get_quote", "description": "A stock's price.", "parameters": {}}],
    }
    client.responses.create(model="fake", input=[loaded], previous_response_id=response.id, tools=tools)
    last = fake.requests()[-1]
    assert offered(last)[-1] == "get_quote"
    assert last["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": "These tools can be used now: get_quote: A stock's price.",
    }
    with pytest.raises(openai.BadRequestError) as refused:  # the client's search is its to answer
        client.responses.create(model="fake", input="go on", previous_response_id=response.id, tools=tools)
    assert call.call_id in refused.value.body["message"]


def test_additional_tools_in_the_input_are_offered_from_there_on(client: openai.OpenAI, fake: FakeRuntime) -> None:
    given: Any = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [{"type": "function", "name": "get_quote", "description": "A stock's price.", "parameters": {}}],
    }
    first = client.responses.create(model="fake", input=[given, {"role": "user", "content": "Hi"}], tools=TOOLS[:1])
    assert offered(fake.requests()[-1]) == ["add", "get_quote"]
    client.responses.create(model="fake", input="Again", previous_response_id=first.id, tools=TOOLS[:1])
    assert offered(fake.requests()[-1]) == ["add", "get_quote"]
    listed = client.responses.input_items.list(first.id, order="asc").data
    assert listed[0].type == "additional_tools"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [TOOLS[1]]}, "tools[0].defer_loading"),
        ({"tools": [TOOLS[2]]}, "tools[0].tools[0].defer_loading"),
        ({"tools": [SEARCH, SEARCH]}, "tools[1]"),
        ({"tools": [{"type": "tool_search", "execution": "elsewhere"}]}, "tools[0].execution"),
        (
            {"input": [{"type": "tool_search_output", "tools": [{"type": "mcp", "server_label": "x"}]}]},
            "input[0].tools[0].type",
        ),
        (
            {"input": [{"type": "tool_search_output", "tools": [{"type": "function", "name": "bad name"}]}]},
            "input[0].tools[0].name",
        ),
    ],
)
def test_bad_input_is_a_400_naming_it(client: openai.OpenAI, body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**{"model": "fake", "input": "hi", **body})
    assert refused.value.body["param"] == param

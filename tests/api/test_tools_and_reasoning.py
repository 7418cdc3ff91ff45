"""Function tools and reasoning through the SDK, with the scripted runtime: what reaches the
model, what comes back as output items and events, and a chain that carries a tool's result."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
import pytest
from openai.types.responses import FunctionToolParam

from tests.conftest import FakeRuntime

WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
WITHOUT_STRICT = cast(FunctionToolParam, {k: v for k, v in WEATHER.items() if k != "strict"})
CALLS_WEATHER = "#fake " + json.dumps({"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]})


def test_a_tool_call_comes_back_as_a_function_call_item(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=CALLS_WEATHER, tools=[WITHOUT_STRICT])
    assert response.status == "completed"
    [call] = response.output
    assert call.type == "function_call" and call.id.startswith("fc_") and call.status == "completed"
    assert (call.name, json.loads(call.arguments), call.call_id) == ("get_weather", {"city": "Paris"}, "call_0")
    assert [t.name for t in response.tools] == ["get_weather"] and response.tool_choice == "auto"
    assert response.tools[0].strict is True  # OpenAI's default, echoed
    [sent] = fake.requests()
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": WEATHER["parameters"],
                "strict": True,  # the echoed strictness reaches the server, which holds calls to the schema
            },
        }
    ]
    assert sent["tool_choice"] == "auto" and "parallel_tool_calls" not in sent


def test_the_tools_result_continues_the_chain(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input=CALLS_WEATHER, tools=[WEATHER])
    call = first.output[0]
    call_id = str(call.call_id)
    second = client.responses.create(
        model="fake",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": '{"temperature": 21}'}],
        tools=[WEATHER],
    )
    assert second.status == "completed"
    messages = fake.requests()[-1]["messages"]
    assert messages[-2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": '{"temperature": 21}'},
    ]
    items = list(client.responses.input_items.list(second.id, order="asc"))
    assert [i.type for i in items] == ["message", "function_call", "function_call_output"]
    assert items[1].id == call.id and items[2].id.startswith("fco_")


def test_continuing_past_a_tool_call_needs_its_output(client: openai.OpenAI, fake: FakeRuntime) -> None:
    two_calls = "#fake " + json.dumps(
        {"tool_calls": [{"name": "get_weather", "arguments": "{}"}, {"name": "get_weather", "arguments": "{}"}]}
    )
    first = client.responses.create(model="fake", input=two_calls, tools=[WEATHER])
    answer_one = [{"type": "function_call_output", "call_id": "call_0", "output": "sunny"}]
    for partial, unanswered in (("Never mind.", "call_0"), (answer_one, "call_1")):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="fake", previous_response_id=first.id, input=cast(Any, partial))
        assert caught.value.body["param"] == "input"
        assert f"No tool output found for function call {unanswered}." in caught.value.message
    both = [*answer_one, {"type": "function_call_output", "call_id": "call_1", "output": "rainy"}]
    assert client.responses.create(model="fake", previous_response_id=first.id, input=cast(Any, both)).status == (
        "completed"
    )
    assert len(fake.requests()) == 2  # the refused ones never reached the model


def test_a_whole_tool_exchange_can_be_sent_as_input(client: openai.OpenAI, fake: FakeRuntime) -> None:
    client.responses.create(
        model="fake",
        input=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "cold"}]},
        ],
        tools=[WEATHER],
    )
    messages = fake.requests()[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "cold"}


def test_a_forced_tool_choice_names_the_function(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(
        model="fake",
        input=CALLS_WEATHER,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    assert response.tool_choice.name == "get_weather" and response.parallel_tool_calls is False
    sent = fake.requests()[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False


def test_a_streamed_tool_call_arrives_in_the_order_the_sdk_expects(client: openai.OpenAI, fake: FakeRuntime) -> None:
    with client.responses.stream(model="fake", input=CALLS_WEATHER, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events if e.type != "response.function_call_arguments.delta"]
    assert types[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [i for i, e in enumerate(events) if e.type == "response.function_call_arguments.delta"]
    assert deltas and deltas == list(range(deltas[0], deltas[0] + len(deltas)))  # between added and done
    assert events[deltas[0] - 1].type == "response.output_item.added"
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == '{"city": "Paris"}'
    assert final.output[0].arguments == '{"city": "Paris"}'


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"tools": [{**WEATHER, "parameters": {"type": "nope"}}]}, "tools[0].parameters", "invalid_json_schema"),
        ({"tools": [{**WEATHER, "name": "bad name!"}]}, "tools[0].name", "invalid_value"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].name", "invalid_value"),
        ({"tools": [{"type": "programmatic_tool_calling"}]}, "tools[0].type", "unsupported_parameter"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}},
            "tool_choice.name",
            "invalid_value",
        ),
        ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        ({"tools": [WEATHER], "max_tool_calls": 0}, "max_tool_calls", "invalid_value"),
    ],
)
def test_bad_tools_are_refused_naming_the_parameter(
    client: openai.OpenAI, fake: FakeRuntime, extra: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="x", **extra)
    assert (caught.value.body["param"], caught.value.body["code"]) == (param, code)
    assert fake.requests() == []


REASONS = "#fake " + json.dumps({"reasoning": "two plus two is four", "text": "Four."})


def test_reasoning_comes_back_as_a_reasoning_item_before_the_answer(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=REASONS)
    reasoning, _ = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.content[0].text == "two plus two is four" and reasoning.summary == []
    assert response.output_text == "Four."
    # The server counted 6 output tokens without saying how many were reasoning: its 5 reasoning chunks are.
    assert (response.usage.output_tokens, response.usage.output_tokens_details.reasoning_tokens) == (6, 5)
    stored = client.responses.retrieve(response.id)
    assert [item.type for item in stored.output] == ["reasoning", "message"]


def test_streamed_reasoning_uses_reasoning_text_events(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="fake", input=REASONS, stream=True))
    deltas = [e for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(e.delta for e in deltas) == "two plus two is four"
    assert {e.output_index for e in deltas} == {0}
    assert {e.output_index for e in events if e.type == "response.output_text.delta"} == {1}
    done = next(e for e in events if e.type == "response.reasoning_text.done")
    assert done.text == "two plus two is four"


def test_earlier_reasoning_is_not_sent_back_to_the_model(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input=REASONS)
    client.responses.create(model="fake", input="And five?", previous_response_id=first.id)
    messages = fake.requests()[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == "Four."

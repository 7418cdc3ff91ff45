"""What the model does under the server, on real vLLM: function calls (guided by vLLM for a
required or named call, read by its hermes parser for `auto`), structured output, logprobs,
`max_output_tokens`, the context window (measured at /tokenize, refused in vLLM's words, cut by
`truncation: "auto"`) and token counts with tools."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.conftest import read_socket
from tests.vllm.conftest import CONTEXT, EXTERNAL, HOSTED, VllmStack
from tests.vllm.test_lifecycle import LONG, user

# Strict-compatible, so strict by default (as at OpenAI), which is what has vLLM hold a call's
# arguments to it; enums, since a strict string has no maxLength and the 135M model may not end one.
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo", "Berlin"]}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": WEATHER_SCHEMA,
}


def the_call(response: Any) -> Any:
    [call] = [item for item in response.output if item.type == "function_call"]
    return call


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_a_required_or_named_call_has_arguments_that_fit_the_schema(vllm: VllmStack, choice: Any) -> None:
    # Greeted, not asked about the weather: only vLLM's guided decoding makes the arguments fit.
    response = vllm.client.responses.create(
        model=HOSTED, input="Hello there!", tools=[WEATHER], tool_choice=choice, max_output_tokens=64
    )
    call = the_call(response)
    assert call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)


def few_shot(city: str) -> list[Any]:
    """Earlier turns in which the assistant called the tool as the hermes format writes a call:
    the 135M model then calls it too, at temperature 0, and vLLM's parser must read the call."""
    turns: list[Any] = []
    for shown in ("Paris", "Rome", "Oslo"):
        call = json.dumps({"name": "get_weather", "arguments": {"city": shown}})
        turns += [
            user(f"What is the weather in {shown}?"),
            {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
        ]
    return [*turns, user(f"What is the weather in {city}?")]


def test_auto_tool_choice_is_parsed_by_vllm_and_the_result_goes_back(vllm: VllmStack) -> None:
    client = vllm.client
    asked = client.responses.create(
        model=HOSTED, input=few_shot("Berlin"), tools=[WEATHER], temperature=0, max_output_tokens=64
    )
    call = the_call(asked)
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)
    assert not asked.output_text  # the hermes markup became the call, not text
    answered = client.responses.create(
        model=HOSTED,
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 22 C"}],
        tools=[WEATHER],
        temperature=0,
        max_output_tokens=32,
    )
    assert answered.status in ("completed", "incomplete") and answered.output


def test_a_strict_json_schema_answer_is_valid_json_of_that_schema(vllm: VllmStack) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}, "bright": {"type": "boolean"}},
        "required": ["colour", "bright"],
        "additionalProperties": False,
    }
    response = vllm.client.responses.create(
        model=HOSTED,
        input="Name a colour, and say whether it is bright.",
        text={"format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}},
        max_output_tokens=64,
    )
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), schema)


def test_logprobs_come_with_each_output_token(vllm: VllmStack) -> None:
    response = vllm.client.responses.create(
        model=HOSTED,
        input=LONG,
        temperature=0,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        max_output_tokens=16,
    )
    assert response.status == "incomplete" and response.usage is not None
    [message] = [item for item in response.output if item.type == "message"]
    [part] = message.content
    assert part.type == "output_text" and part.logprobs is not None
    assert len(part.logprobs) == response.usage.output_tokens == 16
    assert "".join(entry.token for entry in part.logprobs) == part.text
    assert all(entry.logprob <= 0 and len(entry.top_logprobs) == 2 for entry in part.logprobs)


def test_max_output_tokens_ends_the_answer_incomplete(vllm: VllmStack) -> None:
    response = vllm.client.responses.create(model=HOSTED, input=LONG, temperature=0, max_output_tokens=16)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16


def words(word: str, count: int) -> str:
    return " ".join([word] * count)


def test_a_prompt_over_the_context_is_measured_and_refused_before_generating(vllm: VllmStack) -> None:
    requests = vllm.engine_metric("vllm:request_success_total")
    with pytest.raises(openai.BadRequestError) as caught:
        vllm.client.responses.create(model=HOSTED, input=words("apple", CONTEXT + 100), max_output_tokens=16)
    assert (caught.value.body["code"], caught.value.body["param"]) == ("context_length_exceeded", "input")
    assert vllm.engine_metric("vllm:request_success_total") == requests  # counted at /tokenize, never generated


def test_vllms_own_refusal_of_a_prompt_over_the_context_is_context_length_exceeded(vllm: VllmStack) -> None:
    # The external entry does not count prompts: vLLM itself refuses this one, in its own words.
    with pytest.raises(openai.BadRequestError) as caught:
        vllm.client.responses.create(model=EXTERNAL, input=words("apple", CONTEXT + 100), max_output_tokens=16)
    assert (caught.value.body["code"], caught.value.body["param"]) == ("context_length_exceeded", "input")
    [refused] = vllm.proxied()
    assert refused["messages"][-1]["content"].startswith("apple apple")
    events = list(vllm.client.responses.create(model=EXTERNAL, input=words("apple", CONTEXT + 100), stream=True))
    assert events[-1].type == "response.failed"
    error = events[-1].response.error
    assert error is not None and str(error.code) == "context_length_exceeded"  # (not in the SDK's literal type)


def long_conversation() -> list[Any]:
    """Two long turns and a short question: together over the context, the last two within it."""
    return [
        user(words("apple", 1500)),
        {"role": "assistant", "content": "Noted."},
        user(words("pear", 700)),
        {"role": "assistant", "content": "Noted."},
        user("Say hello."),
    ]


@pytest.mark.parametrize("model", [HOSTED, EXTERNAL])
def test_truncation_auto_drops_the_oldest_turns_until_the_prompt_fits(vllm: VllmStack, model: str) -> None:
    # Hosted: measured at /tokenize and cut before sending; external: cut after vLLM's refusal.
    response = vllm.client.responses.create(
        model=model, input=long_conversation(), truncation="auto", max_output_tokens=16
    )
    assert response.status in ("completed", "incomplete") and response.usage is not None
    kept = [user(words("pear", 700)), {"role": "assistant", "content": "Noted."}, user("Say hello.")]
    assert response.usage.input_tokens == vllm.engine_count(kept)
    with pytest.raises(openai.BadRequestError) as caught:
        vllm.client.responses.create(model=model, input=long_conversation(), max_output_tokens=16)
    assert caught.value.body["code"] == "context_length_exceeded"


def test_input_tokens_count_the_tools_as_vllm_renders_them(vllm: VllmStack) -> None:
    client = vllm.client
    counted = client.responses.input_tokens.count(model=HOSTED, input="Weather in Rome?", tools=[WEATHER])
    without = client.responses.input_tokens.count(model=HOSTED, input="Weather in Rome?")
    assert counted.input_tokens > without.input_tokens  # the template lists the tool's signature
    answered = client.responses.create(
        model=HOSTED, input="Weather in Rome?", tools=[WEATHER], tool_choice="required", max_output_tokens=32
    )
    assert answered.usage is not None and answered.usage.input_tokens == counted.input_tokens
    assert without.input_tokens == vllm.engine_count([user("Weather in Rome?")])


def test_a_steer_pending_for_a_tools_result_reaches_the_engine_after_that_result(vllm: VllmStack) -> None:
    """The tier's template refuses a message between tool calls and their results, as templates
    that enforce role order do; a steer sent while the model calls a tool waits for the client's
    tool output, and the engine reads it after that output."""
    call = {"role": "assistant", "content": "", "tool_calls": [_weather_call("call_1")]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."}
    misplaced = [user("Weather in Paris?"), call, user("In Celsius."), result]
    refused = httpx.post(f"{vllm.vllm_url}/v1/chat/completions", json={"model": HOSTED, "messages": misplaced})
    assert refused.status_code == 400 and "followed by their results" in refused.text

    with vllm.client.responses.connect() as connection:
        connection.response.create(
            model=EXTERNAL, input="Weather in Paris?", tools=[WEATHER], tool_choice="required", temperature=0
        )
        events: list[Any] = []
        read_socket(connection, events, until=lambda e: e.type == "response.output_item.added")
        called_id = events[0].response.id
        connection.response.steer(input="In Celsius, please.", previous_response_id=called_id)
        read_socket(connection, events, until=lambda e: e.type == "response.steer.pending")
        [called] = [e.response for e in events if e.type == "response.completed"]
        [function_call] = [item for item in called.output if item.type == "function_call"]
        vllm.clear_proxied()
        output: Any = {"type": "function_call_output", "call_id": function_call.call_id, "output": "Sunny, 24 C."}
        connection.response.create(
            model=EXTERNAL, input=[output], previous_response_id=called_id, tools=[WEATHER], max_output_tokens=40
        )
        [answered] = read_socket(connection, events, ends=1)
    assert answered.status in ("completed", "incomplete") and answered.error is None
    [sent] = vllm.proxied()
    assert [m["role"] for m in sent["messages"]][-3:] == ["assistant", "tool", "user"]
    assert "Celsius" in str(sent["messages"][-1]["content"])


def _weather_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}

"""Responses request + context → Chat Completions request (design, "Runtime contract")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.catalog import LlamaCppModel, ModelEntry, OpenAIModel, ReasoningSupport, SamplingDefaults, VllmModel
from app.protocol.create_request import parse_create_request
from app.protocol.input_items import parse_input
from app.protocol.response_object import ResponseRecord
from app.service.validating import new_record
from workers.translation.chat_request import chat_request
from workers.translation.tools import RuntimeTools, ToolRef

MODEL = OpenAIModel(id="m", runtime="openai", base_url="http://x/v1", upstream_model="up", max_output_tokens=100)


def record(model: ModelEntry = MODEL, /, **body: Any) -> ResponseRecord:
    """The record the service would store for this request body."""
    return new_record(parse_create_request({"model": "m", "input": "x", **body}), model)


def test_system_prompt_is_instructions_then_system_and_developer_messages_in_order() -> None:
    context = parse_input(
        [
            {"role": "developer", "content": "D1"},
            {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"},
            {"role": "system", "content": "S2"},
            {"role": "user", "content": "U2"},
        ]
    )
    body = chat_request(record(instructions="I"), context, MODEL)
    assert body["messages"] == [
        {"role": "system", "content": "I\n\nD1\n\nS2"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "U2"},
    ]


def test_no_system_message_without_instructions_or_system_items() -> None:
    body = chat_request(record(), parse_input("hi"), MODEL)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["model"] == "up"
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ({}, {"max_tokens": 100}),
        ({"max_output_tokens": 20}, {"max_tokens": 20}),
        ({"max_output_tokens": 5000}, {"max_tokens": 100}),
        ({"top_p": 0}, {"max_tokens": 100, "top_p": 1e-9}),
        ({"top_p": 0.5, "temperature": 0}, {"max_tokens": 100, "top_p": 0.5, "temperature": 0}),
    ],
)
def test_sampling_settings(requested: dict[str, Any], expected: dict[str, Any]) -> None:
    body = chat_request(record(**requested), parse_input("x"), MODEL)
    sampling = {k: body[k] for k in ("max_tokens", "top_p", "temperature") if k in body}
    assert sampling == expected


def test_multipart_content_is_joined() -> None:
    context = parse_input(
        [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]
    )
    assert chat_request(record(), context, MODEL)["messages"] == [{"role": "user", "content": "ab"}]


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
JSON_SCHEMA_FORMAT = {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True, "description": None}


def test_structured_output_goes_out_as_each_server_takes_it() -> None:
    context = parse_input("x")
    assert "response_format" not in chat_request(record(), context, MODEL)
    assert chat_request(record(text={"format": {"type": "json_object"}}), context, MODEL)["response_format"] == {
        "type": "json_object"
    }
    assert chat_request(record(text={"format": JSON_SCHEMA_FORMAT}), context, MODEL)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
    }
    llamacpp = LlamaCppModel(id="local", runtime="llamacpp")
    # llama.cpp's server answers json_schema with a 500, and enforces a schema given this way.
    assert chat_request(record(text={"format": JSON_SCHEMA_FORMAT}), context, llamacpp)["response_format"] == {
        "type": "json_object",
        "schema": SCHEMA,
    }


THINKING = OpenAIModel(
    id="t", runtime="openai", base_url="http://x/v1", reasoning=ReasoningSupport(efforts=("none", "low", "high"))
)
GRADED = OpenAIModel(
    id="g", runtime="openai", base_url="http://x/v1", reasoning=ReasoningSupport(control="reasoning_effort")
)


@pytest.mark.parametrize(
    ("model", "effort", "expected"),
    [
        (THINKING, None, {}),  # unset: the model's own default
        (THINKING, "low", {"chat_template_kwargs": {"enable_thinking": True}}),
        (THINKING, "none", {"chat_template_kwargs": {"enable_thinking": False}}),
        (GRADED, "medium", {"reasoning_effort": "medium"}),
        (MODEL, "none", {}),  # a model that does not reason is told nothing
    ],
)
def test_reasoning_effort_reaches_the_server_as_the_catalog_says(
    model: OpenAIModel, effort: str | None, expected: dict[str, Any]
) -> None:
    reasoning = {"reasoning": {"effort": effort}} if effort else {}
    body = chat_request(record(**reasoning), parse_input("x"), model)
    assert {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort") if k in body} == expected


IMAGE = {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"}


def test_images_become_image_url_parts_and_tool_output_images_follow_the_tool_results() -> None:
    context = parse_input(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "Look:"}, IMAGE]},
            {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "taken"}, {**IMAGE, "detail": "auto"}],
            },
        ]
    )
    messages = chat_request(record(), context, MODEL)["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "taken"}
    assert messages[3] == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
    }


def test_the_catalogs_sampling_defaults_apply_where_the_request_leaves_them_unset() -> None:
    tuned = MODEL.model_copy(update={"sampling": SamplingDefaults(temperature=0.2, top_p=0.9, top_k=40)})
    body = chat_request(record(tuned), [], tuned)
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 40)
    asked = record(tuned, temperature=0.7, top_k=5)
    body = chat_request(asked, [], tuned)
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.7, 0.9, 5)  # the request's own win
    # The Response says what it is sampled with.
    assert (asked.settings["temperature"], asked.settings["top_p"]) == (0.7, 0.9)
    assert (record().settings["temperature"], record().settings["top_p"]) == (1.0, 1.0)  # OpenAI's, with none
    assert "temperature" not in chat_request(record(), [], MODEL)  # no default: the server's own


@pytest.mark.parametrize(
    ("grammar", "syntax", "expected"),
    [
        ("structured_outputs", "lark", {"structured_outputs": {"grammar": "start: /a+/"}}),
        ("structured_outputs", "regex", {"structured_outputs": {"regex": "start: /a+/"}}),
        ("guided", "lark", {"guided_grammar": "start: /a+/"}),
        ("guided", "regex", {"guided_regex": "start: /a+/"}),
    ],
)
def test_a_custom_tool_named_in_tool_choice_with_a_grammar_holds_the_answer_to_it(
    grammar: str, syntax: str, expected: dict[str, Any]
) -> None:
    held = MODEL.model_copy(update={"grammar": grammar})
    tool = {"type": "custom", "name": "t", "format": {"type": "grammar", "syntax": syntax, "definition": "start: /a+/"}}
    body = chat_request(record(held, tools=[tool], tool_choice={"type": "custom", "name": "t"}), [], held)
    assert {k: body[k] for k in expected} == expected
    assert "tools" not in body and "tool_choice" not in body


def test_a_strict_function_reaches_the_server_strict_and_a_lax_one_without_it() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = RuntimeTools.of(
        [
            {"type": "function", "name": "held", "description": None, "parameters": schema, "strict": True},
            {"type": "function", "name": "lax", "description": None, "parameters": schema, "strict": False},
            {"type": "custom", "name": "free", "description": None, "format": {"type": "text"}},
        ]
    )
    held, lax, free = (entry["function"] for entry in tools.functions)
    # vLLM holds a required or named call's arguments to the schema only for a strict function.
    assert held["strict"] is True and "strict" not in lax
    assert free["strict"] is True and free["parameters"]["required"] == ["input"]


# Tools a tool search loads: listed after every other tool, or described in the search's output
# (a catalog entry's `loaded_tools`), the tools the request lists, the prompt's start, unchanged.
SEARCHED_TOOLS = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}},
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "defer_loading": True,
    },
    {"type": "tool_search"},
]
SEARCH = [
    *parse_input("Weather in Paris?"),
    {
        "type": "tool_search_call",
        "id": "tsc_1",
        "call_id": "c1",
        "execution": "server",
        "arguments": {"query": "weather"},
    },
    {"type": "tool_search_output", "id": "tso_1", "call_id": "c1", "execution": "server", "tools": [SEARCHED_TOOLS[1]]},
]
VLLM = VllmModel(id="m", runtime="vllm", model="org/m", max_output_tokens=100)


def names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


def test_tools_a_search_loaded_are_listed_after_every_other_by_default() -> None:
    made = record(MODEL, tools=SEARCHED_TOOLS)
    body = chat_request(made, SEARCH, MODEL, RuntimeTools.for_settings(made.settings, context=SEARCH))
    assert names(body) == ["lookup", "tool_search", "get_weather"]
    assert "<tools>" not in body["messages"][-1]["content"]


def test_tools_a_search_loaded_are_described_in_its_output_leaving_the_listed_tools_as_they_were() -> None:
    made = record(VLLM, tools=SEARCHED_TOOLS)
    before = chat_request(made, SEARCH[:1], VLLM)
    after = chat_request(
        made, SEARCH, VLLM, RuntimeTools.for_settings(made.settings, context=SEARCH), earlier_answers=1
    )
    assert before["tools"] == after["tools"] and names(after) == ["lookup", "tool_search"]
    result = after["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "c1"
    signature = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    assert json.dumps(signature) in result["content"]
    # A forced call is held to the tools listed: then they are listed.
    forced = record(VLLM, tools=SEARCHED_TOOLS, tool_choice="required")
    body = chat_request(forced, SEARCH, VLLM, RuntimeTools.for_settings(forced.settings, context=SEARCH))
    assert names(body) == ["lookup", "tool_search", "get_weather"]


def test_a_call_of_a_tool_described_in_context_is_read_as_that_tool() -> None:
    made = record(VLLM, tools=SEARCHED_TOOLS)
    tools = RuntimeTools.for_settings(made.settings, context=SEARCH).loaded_in_context()
    assert tools.ref("get_weather") == ToolRef("function", "get_weather", "get_weather")


def test_tools_an_additional_tools_item_gives_are_listed_whatever_the_model() -> None:
    given = [{"type": "additional_tools", "role": "developer", "tools": [SEARCHED_TOOLS[1]]}]
    made = record(VLLM, tools=SEARCHED_TOOLS)
    body = chat_request(made, given, VLLM, RuntimeTools.for_settings(made.settings, context=given))
    assert names(body) == ["lookup", "tool_search", "get_weather"]

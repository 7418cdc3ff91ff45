"""Responses request + context → Chat Completions request (design, "Runtime contract")."""

from __future__ import annotations

from typing import Any

import pytest

from app.catalog import LlamaCppModel, OpenAIModel
from app.protocol.input_items import parse_input
from app.protocol.response_object import ResponseRecord
from workers.chat_request import chat_request

MODEL = OpenAIModel(id="m", runtime="openai", base_url="http://x/v1", upstream_model="up", max_output_tokens=100)


def record(
    instructions: str | None = None, text_format: dict[str, Any] | None = None, **requested: Any
) -> ResponseRecord:
    return ResponseRecord(
        id="resp_1",
        model="m",
        status="in_progress",
        created_at=0,
        instructions=instructions,
        previous_response_id=None,
        settings={"requested": requested, "text": {"format": text_format or {"type": "text"}}},
        metadata={},
        store=True,
        background=False,
        stream=False,
    )


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
    body = chat_request(record("I"), context, MODEL)
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


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JSON_SCHEMA_FORMAT = {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True, "description": None}


def test_structured_output_goes_out_as_each_server_takes_it() -> None:
    context = parse_input("x")
    assert "response_format" not in chat_request(record(), context, MODEL)
    assert chat_request(record(text_format={"type": "json_object"}), context, MODEL)["response_format"] == {
        "type": "json_object"
    }
    assert chat_request(record(text_format=JSON_SCHEMA_FORMAT), context, MODEL)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
    }
    llamacpp = LlamaCppModel(id="local", runtime="llamacpp")
    # llama.cpp's server answers json_schema with a 500, and enforces a schema given this way.
    assert chat_request(record(text_format=JSON_SCHEMA_FORMAT), context, llamacpp)["response_format"] == {
        "type": "json_object",
        "schema": SCHEMA,
    }

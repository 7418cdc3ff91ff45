"""Validation of create bodies: each failure names its parameter."""

from __future__ import annotations

from typing import Any

import pytest

from app import errors
from app.protocol.create_request import echoed_settings, parse_create_request


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
        (
            {"model": "m", "input": "x", "stream_options": {"include_obfuscation": "no"}},
            "stream_options.include_obfuscation",
        ),
        ({"model": "m", "input": "x", "text": {"verbosity": "loud"}}, "text.verbosity"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
        ({"model": "m", "input": [{"role": "user", "content": "x", "extra": 1}]}, "input[0].extra"),
        ({"model": "m", "input": ["not an object"]}, "input[0]"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "maximal"}}, "reasoning.effort"),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"model": "m", "input": "x", "include": ["message.output_text.everything"]}, "include[0]"),
        ({"model": "m", "input": "x", "safety_identifier": "s" * 65}, "safety_identifier"),
    ],
)
def test_invalid_values_name_their_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        parse_create_request(body)
    assert caught.value.param == param
    assert caught.value.status_code == 400


def test_null_means_absent() -> None:
    create = parse_create_request(
        {
            "model": "m",
            "input": "x",
            "temperature": None,
            "store": None,
            "instructions": None,
            "metadata": None,
            "conversation": None,
        }
    )
    assert create.store is True
    settings = echoed_settings(create, None)
    assert settings["temperature"] == 1.0 and settings["tool_choice"] == "auto" and settings["tools"] == []


def test_a_string_input_is_one_user_message() -> None:
    create = parse_create_request({"model": "m", "input": "hello"})
    assert create.input_items == [
        {"type": "message", "role": "user", "status": "completed", "content": [{"type": "input_text", "text": "hello"}]}
    ]


def test_replayed_assistant_output_is_accepted_without_its_id() -> None:
    create = parse_create_request(
        {
            "model": "m",
            "input": [
                {
                    "type": "message",
                    "id": "msg_old",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "earlier", "annotations": []}],
                }
            ],
        }
    )
    [item] = create.input_items
    assert "id" not in item and item["content"][0]["text"] == "earlier"

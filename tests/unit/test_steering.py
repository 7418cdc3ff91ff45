"""Steering's wire shapes: what a steer's input may be, and the stubs a waiting response names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.protocol.steering import SteerRefused, failed_frame, required_input, steer_items


def test_a_string_or_user_messages_are_steering_input() -> None:
    [message] = steer_items("Use Postgres.")
    assert (message["role"], message["content"]) == ("user", [{"type": "input_text", "text": "Use Postgres."}])
    parts = [{"type": "input_text", "text": "this"}, {"type": "input_image", "image_url": "https://example.com/a.png"}]
    [message] = steer_items([{"type": "message", "role": "user", "content": parts}])
    assert [part["type"] for part in message["content"]] == ["input_text", "input_image"]


@pytest.mark.parametrize(
    "given",
    [
        [],
        7,
        None,
        [{"role": "assistant", "content": "no"}],
        [{"role": "system", "content": "no"}],
        [{"type": "function_call_output", "call_id": "c", "output": "o"}],
        [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
        [{"role": "user", "content": "x", "extra": 1}],
    ],
)
def test_anything_else_is_invalid_input(given: Any) -> None:
    with pytest.raises(SteerRefused) as refused:
        steer_items(given)
    assert refused.value.code == "invalid_input"


def test_a_response_waits_for_the_output_of_each_client_call_and_each_approval() -> None:
    output = [
        {"type": "message", "id": "msg_1"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "patch"},
        {"type": "mcp_call", "id": "mcp_1"},
        {"type": "mcp_approval_request", "id": "mcpr_1"},
    ]
    assert required_input(output) == [
        {"type": "function_call_output", "call_id": "call_1", "name": "lookup"},
        {"type": "custom_tool_call_output", "call_id": "call_2"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1"},
    ]
    assert required_input([{"type": "message", "id": "msg_1"}]) == []


def test_a_failure_hands_the_input_back_with_its_id_once_it_had_one() -> None:
    before = json.loads(failed_frame("invalid_input", "bad", "resp_1", [1]))
    assert before["steer"] == {"previous_response_id": "resp_1", "input": [1]} and "stream_id" not in before
    after = json.loads(failed_frame("response_not_active", "gone", "resp_1", "x", "steer_1", "lane"))
    assert after["steer"]["id"] == "steer_1" and after["stream_id"] == "lane"
    assert after["error"] == {"type": "invalid_request_error", "code": "response_not_active", "message": "gone"}

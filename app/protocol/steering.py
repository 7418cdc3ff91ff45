"""WebSocket steering's wire shapes (../shared/reference/websocket-mode.md §7): a `response.steer`'s
input read as items, the stubs of the input a response waits for from its client, and the
`response.steer.accepted | pending | failed` frames.

Steer frames belong to no response's event log (they are the socket's, not the response's): they
carry `sequence_number` -1, as vLLM numbers the socket's own events."""

from __future__ import annotations

import json
from typing import Any

from app import errors
from app.protocol import client_tools
from app.protocol.input_items import parse_input
from app.protocol.shapes import Item

# Error codes of a steer that will never be applied (OpenAI's ResponseSteerErrorCode).
RESPONSE_NOT_FOUND = "response_not_found"
INVALID_INPUT = "invalid_input"
NOT_SUPPORTED = "steering_not_supported"
TOO_MANY_PENDING = "too_many_pending_steers"
ALREADY_COMPLETED = "response_already_completed"
NOT_ACTIVE = "response_not_active"
SUCCESSOR_FAILED = "successor_creation_failed"

STEER_FIELDS = frozenset({"previous_response_id", "input"})
WAITING_FOR_REQUIRED_INPUT = "waiting_for_required_input"


class SteerRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def steer_items(value: Any) -> list[Item]:
    """A steer's input as input items: a string, or a non-empty array of user messages."""
    if not isinstance(value, str | list):
        raise SteerRefused(INVALID_INPUT, "Invalid 'input': expected a string or an array of user messages.")
    try:
        items = parse_input(value)
    except errors.APIError as error:
        raise SteerRefused(INVALID_INPUT, error.message) from None
    for index, item in enumerate(items):
        if item["type"] != "message" or item["role"] != "user":
            raise SteerRefused(
                INVALID_INPUT,
                f"Invalid 'input[{index}]': steering takes user messages only.",
            )
    return items


def required_input(output: list[Item]) -> list[Item]:
    """What a response that ended with these output items waits for from its client: a stub of
    each tool output or approval it asked for (empty: it waits for nothing)."""
    stubs: list[Item] = []
    for item in output:
        if item["type"] == "function_call":
            stubs.append({"type": "function_call_output", "call_id": item["call_id"], "name": item["name"]})
        elif item["type"] in ("custom_tool_call", *client_tools.CALL_TYPES) or (
            item["type"] == "tool_search_call" and item.get("execution") == "client"
        ):
            answer = "tool_search_output" if item["type"] == "tool_search_call" else f"{item['type']}_output"
            stubs.append({"type": answer, "call_id": item["call_id"]})
        elif item["type"] == "mcp_approval_request":
            stubs.append({"type": "mcp_approval_response", "approval_request_id": item["id"]})
    return stubs


def accepted_frame(steer_id: str, response_id: str, stream_id: str | None) -> str:
    steer = {"id": steer_id, "previous_response_id": response_id}
    return _frame({"type": "response.steer.accepted", "sequence_number": -1, "steer": steer}, stream_id)


def pending_frame(steer_id: str, response_id: str, stubs: list[Item], stream_id: str | None) -> str:
    return _frame(
        {
            "type": "response.steer.pending",
            "sequence_number": -1,
            "steer": {"id": steer_id, "previous_response_id": response_id},
            "reason": WAITING_FOR_REQUIRED_INPUT,
            "required_input": stubs,
        },
        stream_id,
    )


def failed_frame(
    code: str, message: str, target: Any, given: Any, steer_id: str | None = None, stream_id: str | None = None
) -> str:
    """`target` and `given`: the steer's previous_response_id and input as the client sent them."""
    steer: dict[str, Any] = {"previous_response_id": target, "input": given}
    if steer_id is not None:
        steer["id"] = steer_id
    error = {"type": "invalid_request_error", "code": code, "message": message}
    return _frame({"type": "response.steer.failed", "sequence_number": -1, "steer": steer, "error": error}, stream_id)


def _frame(event: dict[str, Any], stream_id: str | None) -> str:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return json.dumps(event)

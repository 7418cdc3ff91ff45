"""MCP tools as requests carry them: what is refused (a 400 naming the parameter, nothing stored),
and approvals that answer nothing asked."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime

URL = "https://mcp.example.com/mcp"


def mcp(**fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "dice", "server_url": URL, **fields}


REFUSED = [
    ({"tools": [mcp(connector_id="connector_gmail")]}, "tools[0].connector_id", "unsupported_parameter"),
    ({"tools": [mcp(tunnel_id="tun_1")]}, "tools[0].tunnel_id", "unsupported_parameter"),
    ({"tools": [mcp(defer_loading=True)]}, "tools[0].defer_loading", "invalid_value"),  # (no tool_search)
    ({"tools": [{"type": "mcp", "server_label": "dice"}]}, "tools[0].server_url", "missing_required_parameter"),
    ({"tools": [mcp(server_url="file:///etc/passwd")]}, "tools[0].server_url", "invalid_value"),
    ({"tools": [mcp(server_label="a b")]}, "tools[0].server_label", "invalid_value"),
    ({"tools": [mcp(headers={"Authorization": "Bearer x"})]}, "tools[0].headers", "invalid_value"),
    ({"tools": [mcp(headers={"X-Key": 7})]}, "tools[0].headers.X-Key", "invalid_value"),
    ({"tools": [mcp(require_approval="sometimes")]}, "tools[0].require_approval", "invalid_value"),
    ({"tools": [mcp(allowed_tools={"names": ["x"]})]}, "tools[0].allowed_tools", "invalid_value"),
    ({"tools": [mcp(), mcp()]}, "tools[1].server_label", "invalid_value"),
    (
        {"tools": [mcp()], "tool_choice": {"type": "mcp", "server_label": "other"}},
        "tool_choice.server_label",
        "invalid_value",
    ),
    (
        {"input": [{"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}]},
        "input[0].approval_request_id",
        "invalid_value",
    ),
    (
        {
            "input": [
                {
                    "type": "mcp_approval_request",
                    "id": "mcpr_1",
                    "server_label": "dice",
                    "name": "roll",
                    "arguments": "{}",
                },
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False},
            ]
        },
        "input[2].approval_request_id",
        "invalid_value",
    ),
    (
        {"input": [{"type": "mcp_call", "server_label": "dice", "name": "roll"}]},
        "input[0].arguments",
        "missing_required_parameter",
    ),
]


@pytest.mark.parametrize(("fields", "param", "code"), REFUSED)
def test_what_is_refused_names_its_parameter_and_stores_nothing(
    client: openai.OpenAI, environment: Environment, fake: FakeRuntime, fields: dict[str, Any], param: str, code: str
) -> None:
    before = environment.query("SELECT count(*) FROM responses")[0][0]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**{"model": "fake", "input": "hi", **fields})
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert environment.query("SELECT count(*) FROM responses")[0][0] == before
    assert fake.requests() == []


def test_an_approval_of_a_request_its_previous_response_did_not_make_is_refused(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    previous = client.responses.create(model="fake", input="hello")
    foreign: Any = {"type": "mcp_approval_response", "approval_request_id": "mcpr_elsewhere", "approve": True}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input=[foreign], previous_response_id=previous.id)
    assert refused.value.body["param"] == "input[0].approval_request_id"


def test_mcp_items_replayed_as_input_are_stored_and_listed(client: openai.OpenAI, fake: FakeRuntime) -> None:
    replayed: list[Any] = [
        {"type": "mcp_list_tools", "server_label": "dice", "tools": [{"name": "roll", "input_schema": {}}]},
        {"type": "mcp_call", "server_label": "dice", "name": "roll", "arguments": "{}", "output": "4"},
        {"role": "user", "content": "and now?"},
    ]
    response = client.responses.create(model="fake", input=replayed)
    listed = client.responses.input_items.list(response.id, order="asc").data
    assert [item.type for item in listed] == ["mcp_list_tools", "mcp_call", "message"]
    assert listed[1].id.startswith("mcp_") and listed[1].output == "4"
    # The model sees the call and its result, though no MCP tool is given this turn.
    [sent] = fake.requests()
    assert sent["messages"][0]["tool_calls"][0]["function"]["name"] == "dice__roll"
    assert sent["messages"][1] == {"role": "tool", "tool_call_id": listed[1].id, "content": "4"}

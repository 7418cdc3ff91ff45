"""No input answers 500: every field that decides how the rest of an object is read (an item's or
a content part's `type`, a message's `role`, a tool's, a format's, a tool choice's, a
context_management entry's) may hold any JSON value, and each route that reads it answers a 4xx
in OpenAI's error envelope naming a parameter. Property-based: hypothesis puts arbitrary JSON
there, so a field added later is covered once its path is listed here."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import InProcess

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

MESSAGE = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
CUSTOM = {"type": "custom", "name": "g", "format": {"type": "grammar", "syntax": "regex", "definition": "a+"}}
NAMESPACE = {"type": "namespace", "name": "ns", "description": "d", "tools": [FUNCTION]}


def create(**fields: Any) -> dict[str, Any]:
    return {"model": "fake", "input": [MESSAGE], **fields}


# (route, a valid body, the path of the field to replace in it)
CASES: list[tuple[str, dict[str, Any], tuple[str | int, ...]]] = [
    *(
        (route, create(), path)
        for route in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact")
        for path in (("input", 0, "type"), ("input", 0, "role"), ("input", 0, "content", 0, "type"), ("input", 0))
    ),
    ("/v1/responses", create(input=[{"type": "function_call_output", "call_id": "c", "output": []}]),
     ("input", 0, "output")),
    ("/v1/responses", create(input=[{"type": "function_call_output", "call_id": "c", "output": [{}]}]),
     ("input", 0, "output", 0, "type")),
    ("/v1/responses", create(tools=[FUNCTION]), ("tools", 0, "type")),
    ("/v1/responses", create(tools=[FUNCTION]), ("tools", 0)),
    ("/v1/responses", create(tools=[CUSTOM]), ("tools", 0, "format", "type")),
    ("/v1/responses", create(tools=[CUSTOM]), ("tools", 0, "format", "syntax")),
    ("/v1/responses", create(tools=[NAMESPACE]), ("tools", 0, "tools", 0, "type")),
    ("/v1/responses", create(tools=[FUNCTION], tool_choice={"type": "function", "name": "f"}), ("tool_choice", "type")),
    ("/v1/responses", create(tools=[FUNCTION]), ("tool_choice",)),
    ("/v1/responses", create(text={"format": {"type": "text"}}), ("text", "format", "type")),
    ("/v1/responses", create(text={"format": {"type": "text"}}), ("text", "format")),
    ("/v1/responses", create(context_management=[{"type": "compaction"}]), ("context_management", 0, "type")),
    ("/v1/responses", create(reasoning={"effort": "none"}), ("reasoning", "effort")),
    ("/v1/responses/input_tokens", create(tools=[FUNCTION]), ("tools", 0, "type")),
    ("/v1/responses/compact", create(), ("input",)),
    ("/v1/conversations", {"items": [MESSAGE]}, ("items", 0, "type")),
    ("/v1/conversations", {"items": [MESSAGE]}, ("items", 0, "role")),
    ("/v1/conversations", {"items": [MESSAGE]}, ("items", 0, "content", 0, "type")),
]  # fmt: skip


def replaced(body: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A copy of `body` with the value at `path` replaced."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(body, list):
        assert isinstance(head, int)
        return [replaced(part, rest, value) if i == head else part for i, part in enumerate(body)]
    return {**body, head: replaced(body.get(head), rest, value)}


@pytest.mark.parametrize(("route", "body", "path"), CASES, ids=[f"{r}:{'.'.join(map(str, p))}" for r, _, p in CASES])
def test_any_json_where_a_field_decides_the_shape_is_a_4xx(
    server: InProcess, api_key: str, route: str, body: dict[str, Any], path: tuple[str | int, ...]
) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(value=JSON)
    def answers_4xx(value: Any) -> None:
        sent = replaced(body, path, value)
        answer = server.http.post(route, json=sent, headers={"Authorization": f"Bearer {api_key}"})
        assert answer.status_code < 500, (sent, answer.text)
        if answer.status_code >= 400:
            error = answer.json()["error"]
            assert error["message"] and error["type"] and "param" in error

    answers_4xx()


def test_a_conversation_items_type_of_any_json_is_a_4xx(server: InProcess, api_key: str) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    conversation = server.http.post("/v1/conversations", json={}, headers=headers).json()["id"]

    @settings(max_examples=40, deadline=None)
    @given(value=JSON)
    def answers_4xx(value: Any) -> None:
        item = {**MESSAGE, "type": value}
        answer = server.http.post(f"/v1/conversations/{conversation}/items", json={"items": [item]}, headers=headers)
        assert answer.status_code < 500, (item, answer.text)

    answers_4xx()


ODD_TYPES = [
    (create(input=[{**MESSAGE, "type": {}}]), "input[0].type"),
    (create(input=[{**MESSAGE, "content": [{"type": ["input_text"], "text": "x"}]}]), "input[0].content[0].type"),
    (create(tools=[{"type": []}]), "tools[0].type"),  # (compact takes no tools)
]


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        *(
            (route, body, param)
            for route in ("/v1/responses", "/v1/responses/input_tokens")
            for body, param in ODD_TYPES
        ),
        *(("/v1/responses/compact", body, param) for body, param in ODD_TYPES[:2]),
    ],
)
def test_an_object_or_array_as_a_type_is_a_400_naming_it(
    server: InProcess, api_key: str, route: str, body: dict[str, Any], param: str
) -> None:
    answer = server.http.post(route, json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 400, answer.text
    assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == (param, "invalid_type")

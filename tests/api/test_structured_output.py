"""Structured output (`text.format`) through the SDK, with the scripted runtime; the embedded
model's real JSON answers are in test_embedded_model.py."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import FunctionToolParam

from tests.conftest import FakeRuntime

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def test_a_json_schema_reaches_the_runtime_and_is_echoed(client: openai.OpenAI, fake: FakeRuntime) -> None:
    answer = json.dumps({"city": "Paris", "country": "France"})
    response = client.responses.create(
        model="fake",
        input="#fake " + json.dumps({"chunks": [answer[:10], answer[10:]]}),
        text={"format": {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}},
    )
    assert json.loads(response.output_text) == {"city": "Paris", "country": "France"}
    echoed = response.text.format
    assert echoed.type == "json_schema" and echoed.name == "place" and echoed.schema_ == SCHEMA and echoed.strict
    assert client.responses.retrieve(response.id).text.format.name == "place"
    [sent] = fake.requests()
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
    }


def test_json_object_mode_reaches_the_runtime(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x", text={"format": {"type": "json_object"}})
    assert response.text.format.type == "json_object"
    assert fake.requests()[0]["response_format"] == {"type": "json_object"}


def test_plain_text_sends_no_response_format(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x", text={"format": {"type": "text"}})
    assert response.text.format.type == "text"
    assert "response_format" not in fake.requests()[0]


# Keys in an order no sorting gives: jsonb would send "a_first" and "m_middle" before "z_first".
ORDERED = {
    "type": "object",
    "properties": {"z_first": {"type": "string"}, "a_second": {"type": "integer"}, "m_third": {"type": "boolean"}},
    "required": ["z_first", "a_second", "m_third"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("background", [False, True])
def test_schemas_reach_the_model_in_the_order_sent(client: openai.OpenAI, fake: FakeRuntime, background: bool) -> None:
    raw = json.dumps(ORDERED)
    tool: FunctionToolParam = {"type": "function", "name": "f", "parameters": ORDERED, "strict": True}
    response = client.responses.create(
        model="fake",
        input="x",
        background=background,
        tools=[tool],
        text={"format": {"type": "json_schema", "name": "ordered", "schema": ORDERED, "strict": True}},
    )
    while response.status in ("queued", "in_progress"):
        response = client.responses.retrieve(response.id)
    [sent] = fake.requests()
    assert json.dumps(sent["response_format"]["json_schema"]["schema"]) == raw
    assert json.dumps(sent["tools"][0]["function"]["parameters"]) == raw
    echoed = client.responses.retrieve(response.id)
    assert list(echoed.to_dict()["text"]["format"]["schema"]["properties"]) == ["z_first", "a_second", "m_third"]
    assert list(echoed.to_dict()["tools"][0]["parameters"]["properties"]) == ["z_first", "a_second", "m_third"]

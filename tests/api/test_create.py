"""POST /v1/responses through the official SDK: JSON, SSE, the Response object, the runtime request."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.api.conftest import InProcess
from tests.conftest import Environment, FakeRuntime

EVERY_FIELD = [
    "id",
    "object",
    "created_at",
    "status",
    "background",
    "completed_at",
    "error",
    "frequency_penalty",
    "incomplete_details",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "model",
    "output",
    "parallel_tool_calls",
    "presence_penalty",
    "previous_response_id",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "usage",
    "user",
    "metadata",
    "access_programs",
    "image",
    "prompt_cache_options",
    "moderation",
    "prompt",
    "input_transformations",
    "prompt_cache_diagnostics",
    "tool_usage",
]


def raw_create(server: InProcess, key: str, **body: object) -> Any:
    return server.http.post(f"{server.base_url}/responses", json=body, headers={"Authorization": f"Bearer {key}"})


def test_create_returns_every_field_of_a_completed_response(server: InProcess, api_key: str, fake: FakeRuntime) -> None:
    body = raw_create(server, api_key, model="fake", input="hello world", metadata={"k": "v"}).json()
    assert list(body) == EVERY_FIELD
    # Every field of the SDK's Response (`conversation` only for a response in one, as OpenAI's).
    assert set(openai.types.responses.Response.model_fields) - {"conversation"} <= set(body)
    assert body["id"].startswith("resp_")
    assert body["object"] == "response"
    assert body["status"] == "completed"
    assert body["model"] == "fake-model"  # aliases resolve to the catalog id
    assert body["store"] is True and body["background"] is False
    assert body["completed_at"] >= body["created_at"]
    assert body["metadata"] == {"k": "v"}
    assert body["error"] is None and body["incomplete_details"] is None
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    assert message["id"].startswith("msg_")
    assert message["content"] == [
        {"type": "output_text", "text": "Echo: hello world", "annotations": [], "logprobs": []}
    ]
    usage = body["usage"]
    assert usage["input_tokens"] == 2 and usage["output_tokens"] == 3
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


def test_sdk_create_and_retrieve_agree(client: openai.OpenAI, fake: FakeRuntime) -> None:
    created = client.responses.create(
        model="fake-model", input="ping", temperature=0.5, top_p=0.9, max_output_tokens=32, metadata={"run": "1"}
    )
    assert created.output_text == "Echo: ping"
    assert (created.temperature, created.top_p, created.max_output_tokens) == (0.5, 0.9, 32)
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()


def test_runtime_gets_instructions_then_system_and_developer_messages(client: openai.OpenAI, fake: FakeRuntime) -> None:
    client.responses.create(
        model="fake",
        instructions="Be brief.",
        temperature=0.2,
        top_p=0,
        input=[
            {"role": "system", "content": "System one."},
            {"role": "user", "content": "question"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Developer two."}]},
        ],
    )
    [sent] = fake.requests()
    assert sent["model"] == "fake-upstream"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief.\n\nSystem one.\n\nDeveloper two."},
        {"role": "user", "content": "question"},
    ]
    assert sent["top_p"] == 1e-9  # top_p 0 means greedy; chat servers reject 0
    assert sent["temperature"] == 0.2
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_unset_sampling_settings_are_left_to_the_runtime(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x")
    [sent] = fake.requests()
    assert "temperature" not in sent and "top_p" not in sent
    assert sent["max_tokens"] == 64  # the catalog's ceiling
    assert (response.temperature, response.top_p) == (1.0, 1.0)  # OpenAI's defaults, echoed


def test_max_output_tokens_is_capped_at_the_model_limit(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x", max_output_tokens=5000)
    assert fake.requests()[0]["max_tokens"] == 64
    assert response.max_output_tokens == 5000


def test_cut_by_max_output_tokens_is_incomplete(client: openai.OpenAI, fake: FakeRuntime) -> None:
    script = json.dumps({"text": " ".join(f"w{i}" for i in range(40))})
    response = client.responses.create(model="fake", input=f"#fake {script}", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == " ".join(f"w{i}" for i in range(16))
    assert response.output[0].status == "incomplete"
    assert response.usage is not None and response.usage.output_tokens == 16


def test_stream_events_follow_openai_order(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="fake", input="one two three", stream=True))
    types = [e.type for e in events]
    opening = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    closing = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[:4] == opening
    assert types[-4:] == [*closing, "response.completed"]
    # Deltas that wait for the same commit are coalesced: at least one, any number up to one per chunk.
    assert 1 <= len(types) - 8 <= 4 and set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == "Echo: one two three"
    assert final.status == "completed" and final.usage is not None


def test_stream_helper_accumulates_the_final_response(client: openai.OpenAI, fake: FakeRuntime) -> None:
    with client.responses.stream(model="fake", input="helper") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == "Echo: helper"
    assert client.responses.retrieve(final.id).output_text == "Echo: helper"


def test_a_nul_character_from_the_model_streams_and_is_stored_as_u_fffd(client: openai.OpenAI) -> None:
    """Postgres text cannot hold NUL. Unreplaced, it failed every commit of its worker's event
    writer (all responses streaming there stalled) until the response was given up on."""
    script = "#fake " + json.dumps({"chunks": ["a", "\u0000", "b"]})
    events = list(client.responses.create(model="fake", input=script, stream=True))
    assert events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "a\ufffdb"
    assert client.responses.retrieve(events[-1].response.id).output_text == "a\ufffdb"


def test_sse_wire_format(server: InProcess, api_key: str, fake: FakeRuntime) -> None:
    with server.http.stream(
        "POST",
        f"{server.base_url}/responses",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": "fake", "input": "a b", "stream": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        blocks = response.read().decode().strip().split("\n\n")
    for block in blocks:
        event_line, data_line = block.split("\n")
        payload = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {payload['type']}"
        assert ("obfuscation" in payload) == payload["type"].endswith(".delta")


def test_obfuscation_can_be_turned_off(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(
        client.responses.create(model="fake", input="a b", stream=True, stream_options={"include_obfuscation": False})
    )
    assert not any("obfuscation" in e.model_dump() for e in events)


def test_store_false_writes_nothing_and_cannot_be_retrieved(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    response = client.responses.create(model="fake", input="secret words", store=False)
    assert response.model_dump()["store"] is False and response.output_text == "Echo: secret words"
    streamed = list(client.responses.create(model="fake", input="secret stream", store=False, stream=True))
    assert streamed[-1].type == "response.completed"
    assert [e.sequence_number for e in streamed] == list(range(len(streamed)))
    for response_id in (response.id, streamed[-1].response.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response_id)
        assert environment.query("SELECT 1 FROM responses WHERE id = $1", response_id) == []
    assert environment.query("SELECT 1 FROM items WHERE payload::text LIKE '%secret%'") == []
    assert environment.query("SELECT 1 FROM response_events WHERE payload::text LIKE '%secret%'") == []


def test_store_false_can_continue_a_stored_chain(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input="remember blue")
    second = client.responses.create(model="fake", input="what colour?", previous_response_id=first.id, store=False)
    assert second.previous_response_id == first.id
    assert [m["content"] for m in fake.requests()[1]["messages"]] == [
        "remember blue",
        "Echo: remember blue",
        "what colour?",
    ]


def test_empty_answer_is_one_empty_message(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input='#fake {"chunks": []}')
    assert response.status == "completed"
    assert response.output_text == ""
    assert len(response.output) == 1


def test_usage_without_a_runtime_report_counts_chunks(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input='#fake {"text": "a b c", "no_usage": true}')
    assert response.usage is not None
    assert response.usage.output_tokens == 3
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_an_upstream_key_from_the_environment_reaches_only_its_server(client: openai.OpenAI, fake: FakeRuntime) -> None:
    client.responses.create(model="keyed-model", input="x")
    client.responses.create(model="fake", input="x")
    assert fake.stats()["authorizations"] == ["Bearer upstream-secret", None]

"""Bad input: a 4xx in OpenAI's envelope naming the parameter, and nothing persisted or queued
(design invariant 6). Runtime failures: a failed response, never a hang or a traceback."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.api.conftest import InProcess
from tests.conftest import Environment, FakeRuntime, rows_written_since, write_mark

BAD_BODIES: list[tuple[dict[str, Any], int, str | None, str | None]] = [
    ({"input": "x"}, 400, "model", "missing_required_parameter"),
    ({"model": "fake"}, 400, "input", "missing_required_parameter"),
    ({"model": "nope", "input": "x"}, 400, "model", "model_not_found"),
    ({"model": "fake", "input": "x", "bogus": 1}, 400, "bogus", "unknown_parameter"),
    ({"model": "fake", "input": "x", "temperature": 3}, 400, "temperature", "invalid_value"),
    ({"model": "fake", "input": "x", "top_p": -0.1}, 400, "top_p", "invalid_value"),
    ({"model": "fake", "input": "x", "max_output_tokens": 8}, 400, "max_output_tokens", "invalid_value"),
    ({"model": "fake", "input": "x", "max_output_tokens": 2**31}, 400, "max_output_tokens", "invalid_value"),
    ({"model": "fake", "input": "x", "max_tool_calls": 2**31}, 400, "max_tool_calls", "invalid_value"),
    ({"model": "fake", "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata", "invalid_value"),
    ({"model": "fake", "input": "x", "metadata": {"k": "v" * 513}}, 400, "metadata", "invalid_value"),
    ({"model": "fake", "input": "x", "store": "yes"}, 400, "store", "invalid_value"),
    ({"model": "fake", "input": []}, 400, "input", "empty_array"),
    ({"model": "fake", "input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role", "invalid_value"),
    ({"model": "fake", "input": [{"role": "user"}]}, 400, "input[0].content", "missing_required_parameter"),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
        400,
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        400,
        "input[0].content[0].image_url",
        "invalid_value",
    ),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-x"}]}]},
        404,
        "input[0].content[0].file_id",
        None,
    ),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
        400,
        "input[0].content[0]",
        "missing_required_parameter",
    ),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        400,
        "input[0].content[0].type",
        "unsupported_parameter",
    ),
    (
        {"model": "fake", "input": [{"type": "item_reference", "id": "msg_1"}]},
        400,
        "input[0].id",
        "invalid_value",
    ),
    ({"model": "fake", "input": "x", "conversation": "conv_1"}, 404, "conversation", None),
    ({"model": "fake", "input": "x", "conversation": {"id": ""}}, 400, "conversation", "invalid_value"),
    ({"model": "fake", "input": "x", "conversation": {"id": "conv_1", "x": 1}}, 400, "conversation", "invalid_value"),
    (
        {"model": "fake", "input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
        400,
        "conversation",
        "mutually_exclusive_parameters",
    ),
    ({"model": "fake", "input": "x", "conversation": "conv_1", "store": False}, 400, "store", "invalid_value"),
    ({"model": "fake", "input": "x", "prompt": {"id": "p"}}, 400, "prompt", "unsupported_parameter"),
    (
        {"model": "fake", "input": "x", "tools": [{"type": "programmatic_tool_calling"}]},
        400,
        "tools[0].type",
        "unsupported_parameter",
    ),
    ({"model": "fake", "input": "x", "truncation": "sometimes"}, 400, "truncation", "invalid_value"),
    (
        {"model": "fake", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
        400,
        "input[0].arguments",
        "missing_required_parameter",
    ),
    (
        {"model": "fake", "input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        400,
        "text.format.name",
        "missing_required_parameter",
    ),
    (
        {
            "model": "fake",
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": 7}}},
        },
        400,
        "text.format.schema",
        "invalid_json_schema",
    ),
    ({"model": "fake", "input": "x", "text": {"format": {"type": "xml"}}}, 400, "text.format.type", "invalid_value"),
    (
        {"model": "plain-model", "input": "x", "text": {"format": {"type": "json_object"}}},
        400,
        "text.format.type",
        "unsupported_value",
    ),
    ({"model": "fake", "input": "x", "include": ["nonsense"]}, 400, "include[0]", "invalid_value"),
    (
        {"model": "fake", "input": "x", "previous_response_id": "resp_missing"},
        400,
        "previous_response_id",
        "previous_response_not_found",
    ),
    # Postgres text cannot hold NUL: refused where it is, not a 503 that a client would retry.
    ({"model": "fake", "input": "a\u0000b"}, 400, "input", "invalid_value"),
    ({"model": "fake", "input": "x", "instructions": "\u0000"}, 400, "instructions", "invalid_value"),
    ({"model": "fake", "input": "x", "metadata": {"topic": "a\u0000"}}, 400, "metadata.topic", "invalid_value"),
    ({"model": "fake", "input": "x", "metadata": {"t\u0000": "a"}}, 400, "metadata.t\u0000", "invalid_value"),
    (
        {"model": "fake", "input": "x", "background": True, "metadata": {"topic": "a\u0000"}},
        400,
        "metadata.topic",
        "invalid_value",
    ),
    (
        {"model": "fake", "input": [{"role": "user", "content": [{"type": "input_text", "text": "\u0000"}]}]},
        400,
        "input[0].content[0].text",
        "invalid_value",
    ),
    (
        {"model": "fake", "input": "x", "previous_response_id": "resp_\u0000"},
        400,
        "previous_response_id",
        "invalid_value",
    ),
]


def post(server: InProcess, key: str, content: bytes, content_type: str = "application/json") -> Any:
    return server.http.post(
        f"{server.base_url}/responses",
        content=content,
        headers={"Authorization": f"Bearer {key}", "Content-Type": content_type},
    )


@pytest.mark.parametrize(("body", "status", "param", "code"), BAD_BODIES)
def test_bad_body_is_refused_naming_the_parameter_and_persists_nothing(
    body: dict[str, Any],
    status: int,
    param: str | None,
    code: str | None,
    server: InProcess,
    api_key: str,
    environment: Environment,
    fake: FakeRuntime,
) -> None:
    mark = write_mark(environment)
    answer = post(server, api_key, json.dumps(body).encode())
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    # The message names the parameter too (OpenAI's verbatim texts for these two name the id instead).
    assert param in error["message"] or code in ("model_not_found", "previous_response_not_found") or status == 404
    assert answer.headers["x-request-id"].startswith("req_")
    assert rows_written_since(environment, mark) == (0, 0, 0)
    assert fake.requests() == []  # nothing reached the model


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/responses/resp_%00"),
        ("GET", "/responses/resp_%00?stream=true"),
        ("GET", "/responses/resp_%00/input_items"),
        ("POST", "/responses/resp_%00/cancel"),
        ("DELETE", "/responses/resp_%00"),
    ],
)
def test_an_id_with_a_nul_character_is_unknown(method: str, path: str, server: InProcess, api_key: str) -> None:
    answer = server.http.request(method, server.base_url + path, headers={"Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == {
        "message": "Response with id 'resp_\x00' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_an_input_items_cursor_with_a_nul_character_is_in_no_context(
    server: InProcess, api_key: str, client: openai.OpenAI
) -> None:
    response = client.responses.create(model="fake", input="hello")
    answer = server.http.get(
        f"{server.base_url}/responses/{response.id}/input_items?after=msg_%00",
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert answer.status_code == 400, answer.text
    assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == ("after", "invalid_value")


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("?stream=true&starting_after=2147483648", "starting_after"),  # past a Postgres integer
        ("?stream=true&starting_after=-2", "starting_after"),
        ("?stream=true&starting_after=\u0661\u0660", "starting_after"),  # Arabic-Indic digits: int() takes them
        ("?stream=true&starting_after=1_0", "starting_after"),
        ("?stream=true&starting_after=%2010", "starting_after"),
        ("?stream=true&starting_after=99999999999999999999999", "starting_after"),
        ("/input_items?limit=\u0661\u0660", "limit"),
        ("/input_items?limit=1_0", "limit"),
        ("/input_items?limit=101", "limit"),
        ("/input_items?limit=0", "limit"),
    ],
)
def test_a_number_in_the_query_is_ascii_digits_in_range_or_400(
    path: str, param: str, server: InProcess, api_key: str, client: openai.OpenAI
) -> None:
    with client.responses.create(model="fake", input="hello", background=True, stream=True) as stream:
        # Followed to its end: left running, its last events landed in the next test's count of
        # rows written (test_what_is_not_strict_json_is_400_and_persists_nothing).
        [response_id] = [event.response.id for event in stream if event.type == "response.completed"]
    answer = server.http.get(
        f"{server.base_url}/responses/{response_id}{path}", headers={"Authorization": f"Bearer {api_key}"}
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, "invalid_value", "invalid_request_error")
    assert param in error["message"]


def test_invalid_json_is_400(server: InProcess, api_key: str) -> None:
    answer = post(server, api_key, b"{not json")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "fake", "input": "x", "temperature": NaN}',
        b'{"model": "fake", "input": "x", "metadata": {"a": Infinity}}',
        b'{"model": "fake", "input": "x", "max_output_tokens": 1e400}',
        b'{"model": "fake", "input": "\\ud800"}',  # a lone surrogate: no UTF-8 for it
        b'{"model": "fake", "input": "x", "metadata": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2000 + b"}",
    ],
    ids=["nan", "infinity", "overflow", "lone-surrogate", "2000-levels"],
)
def test_what_is_not_strict_json_is_400_and_persists_nothing(
    raw: bytes, server: InProcess, api_key: str, environment: Environment
) -> None:
    """Python's parser took NaN and Infinity (then Postgres refused them: a 503 'please retry')
    and ran out of stack on deep nesting (a 500)."""
    mark = write_mark(environment)
    answer = post(server, api_key, raw)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_json"
    assert rows_written_since(environment, mark) == (0, 0, 0)


def nested_schema(levels: int) -> dict[str, Any]:
    """A function's parameters with objects inside objects: two JSON levels per schema level."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_a_body_nested_past_the_limit_is_refused_naming_where(
    server: InProcess, api_key: str, environment: Environment, client: openai.OpenAI
) -> None:
    tool = {"type": "function", "name": "f", "parameters": nested_schema(60)}
    mark = write_mark(environment)
    answer = post(server, api_key, json.dumps({"model": "fake", "input": "x", "tools": [tool]}).encode())
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"].startswith("tools[0].parameters.properties.a.properties.a")
    assert error["code"] == "invalid_value" and "nested more than 100 levels deep" in error["message"]
    assert rows_written_since(environment, mark) == (0, 0, 0)
    # Well within it, a deep schema is served.
    deep = {"type": "function", "name": "f", "parameters": nested_schema(40)}
    assert client.responses.create(model="fake", input="x", tools=[deep]).status == "completed"  # type: ignore[list-item]


def test_non_json_content_type_is_415(server: InProcess, api_key: str) -> None:
    answer = post(server, api_key, b"model=fake", "application/x-www-form-urlencoded")
    assert answer.status_code == 415
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_body_over_the_limit_is_413(server: InProcess, api_key: str) -> None:
    answer = post(server, api_key, json.dumps({"model": "fake", "input": "x" * (17 * 1024 * 1024)}).encode())
    assert answer.status_code == 413
    assert "limit" in answer.json()["error"]["message"]


def test_every_answer_has_a_request_id(server: InProcess, api_key: str) -> None:
    for answer in (
        server.http.get(f"{server.base_url}/responses/resp_x", headers={"Authorization": f"Bearer {api_key}"}),
        server.http.get(f"{server.base_url}/nowhere"),
        server.http.get(server.base_url.removesuffix("/v1") + "/health"),
    ):
        assert answer.headers["x-request-id"].startswith("req_")
    nowhere = server.http.get(f"{server.base_url}/nowhere").json()
    assert set(nowhere["error"]) == {"message", "type", "param", "code"}


def test_unknown_response_id_is_404_in_the_envelope(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve("resp_unknown")
    assert caught.value.body == {
        "message": "Response with id 'resp_unknown' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_unreachable_runtime_fails_the_response_with_a_5xx(client: openai.OpenAI, environment: Environment) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model="unreachable-model", input="x")
    assert caught.value.status_code == 502
    assert "unreachable" in caught.value.message
    [row] = environment.query(
        "SELECT id, status, error FROM responses WHERE model = 'unreachable-model' ORDER BY created_at DESC LIMIT 1"
    )
    assert row["status"] == "failed"
    assert row["id"] in caught.value.message
    stored = client.responses.retrieve(row["id"])
    assert stored.status == "failed" and stored.error is not None and stored.error.code == "server_error"


def test_runtime_http_error_streams_response_failed(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="fake", input='#fake {"status": 500}', stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None
    assert "500" in failed.error.message


def test_usage_a_runtime_reports_as_null_is_counted_and_the_response_completes(client: openai.OpenAI) -> None:
    """It used to fail only after the stream: the response was left running until the reaper."""
    script = {"text": "a b c", "usage": {"prompt_tokens": 4, "completion_tokens": None, "total_tokens": None}}
    events = list(client.responses.create(model="fake", input=f"#fake {json.dumps(script)}", stream=True))
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (4, 3, 7)


def test_text_a_runtime_sends_as_a_number_fails_the_response_naming_it(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="fake", input='#fake {"chunks": ["a", 5]}', stream=True))
    failed = events[-1].response
    assert events[-1].type == "response.failed" and failed.error is not None
    assert "content that is not text" in failed.error.message


@pytest.mark.parametrize("script", ['{"text": "a b c d", "error_after": 2}', '{"text": "a b c d", "break_after": 2}'])
def test_mid_stream_failure_keeps_the_partial_output(script: str, client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="fake", input=f"#fake {script}", stream=True))
    assert events[-1].type == "response.failed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed = client.responses.retrieve(events[-1].response.id)
    assert failed.status == "failed"
    assert failed.output_text == "a b"
    assert failed.output[0].status == "incomplete"
    assert len(fake.requests()) == 1  # after the first token nothing is retried


def test_a_runtime_that_fails_before_the_first_token_is_asked_again(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input='#fake {"status": 503, "fail_times": 1, "text": "ok"}')
    assert response.status == "completed" and response.output_text == "ok"
    assert len(fake.requests()) == 2


def test_a_connection_dropped_before_the_first_token_is_retried_then_fails(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    events = list(client.responses.create(model="fake", input='#fake {"text": "a b", "break_after": 0}', stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    assert len(fake.requests()) == 3  # the first try and max_retries (2) more


def test_a_runtime_that_refuses_the_request_is_not_asked_again(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="fake", input='#fake {"status": 400}', stream=True))
    assert events[-1].type == "response.failed" and "400" in events[-1].response.error.message
    assert len(fake.requests()) == 1


def test_input_longer_than_the_context_is_a_400_naming_input(client: openai.OpenAI, fake: FakeRuntime) -> None:
    script = '#fake {"context_window": 50}\n' + "word " * 60
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input=script)
    assert caught.value.status_code == 400
    assert caught.value.body["code"] == "context_length_exceeded" and caught.value.body["param"] == "input"
    assert len(fake.requests()) == 1  # a refusal is not retried
    events = list(client.responses.create(model="fake", input=script, stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == "context_length_exceeded"


def test_a_models_read_timeout_fails_a_silent_stream(client: openai.OpenAI, fake: FakeRuntime) -> None:
    events = list(client.responses.create(model="impatient-model", input='#fake {"first_delay": 2}', stream=True))
    assert events[-1].type == "response.failed"
    assert "Timeout" in events[-1].response.error.message
    assert len(fake.requests()) == 1  # max_retries = 0
    assert client.responses.create(model="impatient-model", input="quick").status == "completed"

"""WebSocket mode through the OpenAI SDK's `client.responses.connect()` and raw frames: creates
on a socket are answered with the same numbered events as SSE, from the same stored log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from tests.conftest import Environment, FakeRuntime, Server, api_client, free_port, start_api, stop, wait_until


def _until_terminal(connection: Any) -> list[Any]:
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the socket closed before the response ended")


def _socket_url(server: Server) -> str:
    return server.base_url.replace("http://", "ws://") + "/responses"


@pytest.fixture
def raw_socket(server: Server, api_key: str) -> Iterator[Connection]:
    with connect(_socket_url(server), additional_headers={"Authorization": f"Bearer {api_key}"}) as socket:
        yield socket


def _frames_until_terminal(socket: Connection) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(socket.recv(timeout=30))
        frames.append(frame)
        if frame["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return frames


def test_turns_on_one_socket_stream_numbered_events_that_are_stored(client: openai.OpenAI) -> None:
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="first turn")
        first = _until_terminal(connection)
        assert [e.sequence_number for e in first] == list(range(len(first)))
        assert [first[0].type, first[-1].type] == ["response.created", "response.completed"]
        done = first[-1].response
        assert done.output_text == "Echo: first turn"
        assert "".join(e.delta for e in first if e.type == "response.output_text.delta") == done.output_text

        connection.response.create(model="fake", input="second turn", previous_response_id=done.id)
        second = _until_terminal(connection)
        assert second[-1].response.previous_response_id == done.id
        assert second[-1].response.output_text == "Echo: second turn"
    # The same responses over HTTP: stored, chained, and their logs replayed alike.
    assert client.responses.retrieve(done.id).output_text == "Echo: first turn"
    context = client.responses.input_items.list(second[-1].response.id, order="asc").data
    assert [item.role for item in context] == ["user", "assistant", "user"]  # the chain's


def test_a_store_false_response_is_continued_from_the_socket_s_own_memory(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="remember the word plum", store=False)
        first = _until_terminal(connection)[-1].response
        with pytest.raises(openai.NotFoundError):  # stored nowhere
            client.responses.retrieve(first.id)
        fake.reset()
        connection.response.create(model="fake", input="which word?", store=False, previous_response_id=first.id)
        second = _until_terminal(connection)[-1]
    assert second.type == "response.completed" and second.response.output_text == "Echo: which word?"
    assert second.response.previous_response_id is None  # (its parent is stored nowhere)
    [request] = fake.requests()
    said = [(m["role"], m["content"]) for m in request["messages"]]
    assert said == [
        ("user", "remember the word plum"),
        ("assistant", "Echo: remember the word plum"),
        ("user", "which word?"),
    ]


def test_a_store_false_parent_the_socket_does_not_hold_is_not_found(client: openai.OpenAI) -> None:
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="x", store=False, previous_response_id="resp_unknown")
        [error] = _until_terminal(connection)
    assert error.type == "error"
    assert error.error.code == "previous_response_not_found" and error.error.param == "previous_response_id"
    assert error.status == 400  # (OpenAI's; vLLM answers 404)


def test_a_tool_round_trip_on_the_socket(client: openai.OpenAI) -> None:
    script = "#fake " + json.dumps(
        {"tool_calls": [{"name": "lookup", "arguments": '{"q": "plum"}'}], "then": {"text": "found it"}}
    )
    tool: Any = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input=script, tools=[tool], store=False)
        called = _until_terminal(connection)[-1].response
        [call] = [item for item in called.output if item.type == "function_call"]
        assert call.name == "lookup"
        connection.response.create(
            model="fake",
            tools=[tool],
            store=False,
            previous_response_id=called.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "plum: a fruit"}],
        )
        answered = _until_terminal(connection)[-1].response
    assert answered.output_text == "found it"


def test_a_warm_up_generates_nothing_and_can_be_continued(client: openai.OpenAI, fake: FakeRuntime) -> None:
    fake.reset()
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="context only", store=False, generate=False)
        warm = _until_terminal(connection)
        assert [e.type for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1].response.output == [] and warm[-1].response.usage.total_tokens == 0
        assert not fake.requests()
        connection.response.create(
            model="fake", input="now answer", store=False, previous_response_id=warm[-1].response.id
        )
        answered = _until_terminal(connection)[-1].response
    assert answered.output_text == "Echo: now answer"
    [request] = fake.requests()
    assert [m["content"] for m in request["messages"]] == ["context only", "now answer"]


def test_lanes_carry_their_stream_id_and_run_side_by_side(raw_socket: Connection) -> None:
    slow = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(20)), "delay": 0.05})
    for lane in ("a", "b"):
        raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": slow, "stream_id": lane}))
    ended: dict[str, dict[str, Any]] = {}
    seen: list[tuple[str, str]] = []
    while len(ended) < 2:
        frame = json.loads(raw_socket.recv(timeout=30))
        seen.append((frame["stream_id"], frame["type"]))
        if frame["type"] == "response.completed":
            ended[frame["stream_id"]] = frame["response"]
    assert ended["a"]["id"] != ended["b"]["id"]
    for lane in ("a", "b"):
        numbers = [n for n, (stream_id, _) in enumerate(seen) if stream_id == lane]
        assert seen[numbers[0]][1] == "response.created" and seen[numbers[-1]][1] == "response.completed"
    # Side by side: each lane's response started before the other's ended.
    first_end = seen.index(("a", "response.completed")), seen.index(("b", "response.completed"))
    assert seen.index(("b", "response.created")) < first_end[0] and seen.index(("a", "response.created")) < first_end[1]


def test_bad_frames_get_error_events_and_the_socket_stays_usable(raw_socket: Connection) -> None:
    bad = [
        ("not json", "invalid_json", None),
        (json.dumps([1, 2]), "invalid_json", None),
        (json.dumps({"model": "fake"}), "missing_required_parameter", "type"),
        (json.dumps({"type": "response.cancel"}), "unknown_event_type", "type"),
        (json.dumps({"type": "response.create", "stream_id": ""}), "invalid_stream_id", "stream_id"),
        (json.dumps({"type": "response.create", "model": "fake", "input": "x", "generate": "no"}), None, "generate"),
        (json.dumps({"type": "response.create", "model": "fake", "input": [{"type": {}}]}), None, "input[0].type"),
        (json.dumps({"type": "response.create", "model": "nope", "input": "x"}), "model_not_found", "model"),
    ]
    for text, code, param in bad:
        raw_socket.send(text)
        frame = json.loads(raw_socket.recv(timeout=10))
        assert frame["type"] == "error" and frame["status"] in (400, 404), (text, frame)
        assert frame["error"]["param"] == param, (text, frame)
        if code is not None:
            assert frame["error"]["code"] == code, (text, frame)
    raw_socket.send(b"binary")
    assert json.loads(raw_socket.recv(timeout=10))["error"]["code"] == "invalid_json"
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": "still here"}))
    [message] = _frames_until_terminal(raw_socket)[-1]["response"]["output"]
    assert message["content"][0]["text"] == "Echo: still here"


def test_a_refused_key_is_a_401_in_openai_s_form_before_the_upgrade(server: Server) -> None:
    for headers in ({}, {"Authorization": "Bearer sk-not-a-key-of-ours"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(_socket_url(server), additional_headers=headers)
        assert refused.value.response.status_code == 401
        body = json.loads(refused.value.response.body)
        assert body["error"]["code"] in ("missing_api_key", "invalid_api_key")


def test_a_socket_closed_mid_answer_stops_a_foreground_response_and_not_a_background_one(
    client: openai.OpenAI, server: Server, api_key: str, fake: FakeRuntime
) -> None:
    words = " ".join(f"w{i}" for i in range(60))
    slow = "#fake " + json.dumps({"text": words, "delay": 0.1})
    ids: dict[str, str] = {}
    for mode in ("foreground", "background"):
        with connect(_socket_url(server), additional_headers={"Authorization": f"Bearer {api_key}"}) as socket:
            socket.send(
                json.dumps(
                    {"type": "response.create", "model": "fake", "input": slow, "background": mode == "background"}
                )
            )
            while (frame := json.loads(socket.recv(timeout=10)))["type"] != "response.output_text.delta":
                ids[mode] = frame.get("response", {}).get("id", ids.get(mode))
    wait_until(lambda: client.responses.retrieve(ids["foreground"]).status == "cancelled", timeout=20)
    # The background one goes on, and its stream can be followed over SSE.
    resumed = list(client.responses.retrieve(ids["background"], stream=True, starting_after=2))
    assert resumed[0].sequence_number == 3 and resumed[-1].type == "response.completed"
    assert resumed[-1].response.output_text == words


def test_a_socket_reaching_its_lifetime_is_told_and_closed(
    environment: Environment, server: Server, api_key: str
) -> None:
    """(`server`: its worker serves this API's queue too.)"""
    with api_client(environment, api_key, RESPONSES_WEBSOCKET_MAX_SECONDS="2") as client:
        url = str(client.base_url).replace("http://", "ws://") + "responses"
        with connect(url, additional_headers={"Authorization": f"Bearer {api_key}"}) as socket:
            socket.send(json.dumps({"type": "response.create", "model": "fake", "input": "in time"}))
            assert _frames_until_terminal(socket)[-1]["type"] == "response.completed"
            frame = json.loads(socket.recv(timeout=10))
            assert frame["type"] == "error" and frame["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_an_oversized_frame_closes_the_socket_with_1009(environment: Environment, api_key: str) -> None:
    with api_client(environment, api_key, RESPONSES_WEBSOCKET_MAX_MESSAGE_BYTES="1000") as client:
        url = str(client.base_url).replace("http://", "ws://") + "responses"
        with connect(url, additional_headers={"Authorization": f"Bearer {api_key}"}) as socket:
            socket.send(json.dumps({"type": "response.create", "model": "fake", "input": "x" * 2000}))
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        assert httpx.get(str(client.base_url).replace("/v1/", "/health")).status_code == 200


CODEX_FIRST = Path(__file__).resolve().parent.parent / "fixtures" / "clients" / "codex-exec-first-request.json"


def test_codex_s_turn_on_the_socket_warm_up_then_deltas_chained_by_id(
    raw_socket: Connection, fake: FakeRuntime
) -> None:
    """Codex's frames as it sends them (its recorded request, on the socket as its 0.171 does): a
    warm-up with its instructions only, then the rest of the input by `previous_response_id`, a
    tool call, and its output the same way; all store=false, so the socket's memory chains them."""
    body = {**json.loads(CODEX_FIRST.read_text()), "model": "fake"}
    *setup, task = body["input"]
    call = {"name": "shell", "arguments": json.dumps({"command": ["ls"]}), "id": "call_ls"}
    task = {
        **task,
        "content": [
            {
                "type": "input_text",
                "text": "#fake " + json.dumps({"tool_calls": [call], "then": {"text": "Two files."}}),
            }
        ],
    }
    fake.reset()
    raw_socket.send(json.dumps({"type": "response.create", **body, "input": setup[:1], "generate": False}))
    warm = _frames_until_terminal(raw_socket)[-1]["response"]
    assert warm["status"] == "completed" and warm["output"] == []
    raw_socket.send(
        json.dumps({"type": "response.create", **body, "input": [*setup[1:], task], "previous_response_id": warm["id"]})
    )
    called = _frames_until_terminal(raw_socket)[-1]["response"]
    [function_call] = [item for item in called["output"] if item["type"] == "function_call"]
    output = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "a.txt b.txt"}
    raw_socket.send(
        json.dumps({"type": "response.create", **body, "input": [output], "previous_response_id": called["id"]})
    )
    answered = _frames_until_terminal(raw_socket)[-1]["response"]
    assert answered["status"] == "completed"
    assert answered["output"][-1]["content"][0]["text"] == "Two files."
    # The model saw the whole turn: Codex's instructions, its task, the call and its result.
    last = fake.requests()[-1]["messages"]
    assert [m["role"] for m in last][:1] + [m["role"] for m in last][-2:] == ["system", "assistant", "tool"]
    assert last[-1]["content"] == "a.txt b.txt" and len(fake.requests()) == 2


def test_the_sdk_reconnects_when_the_api_restarts_and_continues_a_stored_response(
    environment: Environment, server: Server, api_key: str, fake: FakeRuntime
) -> None:
    """The API restarted under a socket: the SDK reconnects (its `on_reconnecting`), the create it
    queued meanwhile goes out on the new socket and continues a stored response, and the background
    response that was streaming goes on, to be retrieved."""
    port = free_port()
    api = start_api(environment, port)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0)
    words = " ".join(f"w{i}" for i in range(40))
    close_codes: list[int] = []
    sockets: list[Any] = []
    first: Any = None

    def reconnecting(event: Any) -> None:
        if not close_codes:  # sent while reconnecting: queued, and sent on the new socket
            sockets[0].response.create(model="fake", input="after the restart", previous_response_id=first.id)
        close_codes.append(event.close_code)

    try:
        with client.responses.connect(on_reconnecting=reconnecting, max_retries=20, initial_delay=0.2) as connection:
            sockets.append(connection)
            connection.response.create(model="fake", input="before the restart")
            first = _until_terminal(connection)[-1].response
            slow = "#fake " + json.dumps({"text": words, "delay": 0.1})
            connection.response.create(model="fake", input=slow, background=True)
            running = next(e for e in connection if e.type == "response.created").response.id
            stop(api)
            api = start_api(environment, port)
            after = [e for e in _until_terminal(connection) if e.type == "response.completed"]
        assert close_codes[:1] == [1012]  # (service restart: the SDK reconnects after it)
        [done] = after
        assert done.response.output_text == "Echo: after the restart"
        assert done.response.previous_response_id == first.id
        wait_until(lambda: client.responses.retrieve(running).status == "completed", timeout=30)
        assert client.responses.retrieve(running).output_text == words
    finally:
        stop(api)


def test_a_prewarm_on_the_socket_is_a_warm_up(raw_socket: Connection, fake: FakeRuntime) -> None:
    fake.reset()
    options = {"prewarm": True, "mode": "explicit"}
    raw_socket.send(
        json.dumps({"type": "response.create", "model": "fake", "input": "x", "prompt_cache_options": options})
    )
    frames = _frames_until_terminal(raw_socket)
    assert [f["type"] for f in frames] == ["response.created", "response.in_progress", "response.completed"]
    assert frames[-1]["response"]["prompt_cache_options"] == {"mode": "explicit"}
    assert not fake.requests()


def test_another_accounts_socket_cannot_continue_or_read_a_response(
    client: openai.OpenAI, other_client: openai.OpenAI
) -> None:
    """A socket is its key's account's, as HTTP is: another account's response is not found,
    whether it was stored or lives in a socket's memory (store=false), and the socket goes on."""
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input="ours, stored")
        stored = _until_terminal(connection)[-1].response
        connection.response.create(model="fake", input="ours, unstored", store=False)
        unstored = _until_terminal(connection)[-1].response
    with other_client.responses.connect() as connection:
        for parent in (stored.id, unstored.id):
            connection.response.create(model="fake", input="theirs", previous_response_id=parent)
            [refused] = _until_terminal(connection)
            assert refused.type == "error" and refused.error.code == "previous_response_not_found"
            assert refused.error.param == "previous_response_id"
        connection.response.create(model="fake", input="still usable")
        assert _until_terminal(connection)[-1].response.output_text == "Echo: still usable"
    with pytest.raises(openai.NotFoundError):
        other_client.responses.retrieve(stored.id)

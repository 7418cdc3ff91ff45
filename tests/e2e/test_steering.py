"""WebSocket steering (`response.steer`) through the OpenAI SDK's `client.responses.connect()` and
raw frames: a steered response ends at its next output boundary, `incomplete` with reason
`steered`, and its successor, created on the same lane with the steered response's settings,
answers the steer's input; a response waiting for its client keeps its steers for the client's next
create; what cannot be steered is refused with OpenAI's codes."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from tests.conftest import Environment, FakeRuntime, Server, read_socket
from tests.e2e.processes import Stack
from tests.e2e.test_continuation import running_worker, two_workers
from tests.mcp_server import McpTestServer
from tests.mcp_server import tool_call as mcp_call

SLOW_REASONING = "#fake " + json.dumps(
    {"reasoning": " ".join(f"r{i}" for i in range(40)), "text": "the first answer", "delay": 0.05}
)
SLOW_TEXT = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(20)), "delay": 0.05})
LOOKUP: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}


@pytest.fixture
def raw_socket(server: Server, api_key: str) -> Iterator[Connection]:
    url = server.base_url.replace("http://", "ws://") + "/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {api_key}"}) as socket:
        yield socket


def _frames_until(socket: Connection, done: Any) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(socket.recv(timeout=30))
        frames.append(frame)
        if done(frame):
            return frames


def _ends(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["response"] for f in frames if f["type"] in TERMINAL_EVENT_TYPES]


def test_a_steer_ends_the_response_at_its_next_item_and_its_successor_answers_it(
    client: openai.OpenAI, environment: Environment, fake: FakeRuntime
) -> None:
    settings: Any = {"instructions": "Be brief.", "max_output_tokens": 77, "metadata": {"run": "steer"}}
    aborted = fake.stats()["streams_aborted"]
    events: list[Any] = []
    with client.responses.connect() as connection:
        connection.response.create(model="fake", input=SLOW_REASONING, **settings)
        read_socket(connection, events, until=lambda event: "reasoning" in event.type and event.type.endswith(".delta"))
        steered_id = events[0].response.id
        connection.response.steer(input="Use Postgres.", previous_response_id=steered_id)
        ends = read_socket(connection, events, ends=2)
    types = [e.type for e in events]
    [accepted] = [e for e in events if e.type == "response.steer.accepted"]
    assert accepted.steer.previous_response_id == steered_id and accepted.steer.id.startswith("steer_")
    steered, successor = ends
    # The steered one ended where its reasoning item ended: no message was begun.
    assert steered.id == steered_id and steered.status == "incomplete"
    assert steered.incomplete_details is not None and steered.incomplete_details.reason == "steered"
    assert [item.type for item in steered.output] == ["reasoning"]
    assert types.index("response.steer.accepted") < types.index("response.incomplete")
    # Its successor came on its own, after it, with its settings and the steer as input.
    created = [e.response.id for e in events if e.type == "response.created"]
    assert created == [steered_id, successor.id]
    assert successor.status == "completed" and successor.output_text == "Echo: Use Postgres."
    assert successor.previous_response_id == steered_id
    assert (successor.instructions, successor.max_output_tokens, successor.metadata) == (
        "Be brief.",
        77,
        {"run": "steer"},
    )
    assert fake.stats()["streams_aborted"] > aborted  # the steered generation was stopped, not run out
    # Stored as it ran: the steered response, the successor's context, and the steer taken.
    assert client.responses.retrieve(steered_id).incomplete_details.reason == "steered"
    context = client.responses.input_items.list(successor.id, order="asc").data
    assert [(item.type, getattr(item, "role", None)) for item in context] == [
        ("message", "user"),
        ("reasoning", None),
        ("message", "user"),
    ]
    [row] = environment.query(
        "SELECT id, response_id, successor_id FROM response_steers WHERE response_id = $1", steered_id
    )
    assert (row["id"], row["successor_id"]) == (accepted.steer.id, successor.id)


def _until_ends(socket: Connection, count: int, frames: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The frames up to the `count`-th terminal event (counting those in `frames`, which come first)."""
    frames = list(frames or [])
    while len(_ends(frames)) < count:
        frames.append(json.loads(socket.recv(timeout=30)))
    return frames


def test_a_response_that_ends_first_keeps_its_answer_and_still_gets_its_successor(raw_socket: Connection) -> None:
    """Its one item, a message, is its last: the steers wait for its end, then go in in their order."""
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": SLOW_TEXT, "stream_id": "a"}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.output_text.delta")
    steered_id = first[0]["response"]["id"]
    for text in ("one", "two"):
        raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": steered_id, "input": text}))
    frames = _until_ends(raw_socket, 2, first)
    accepted = [f for f in frames if f["type"] == "response.steer.accepted"]
    assert len(accepted) == 2 and all(f["stream_id"] == "a" for f in frames)
    assert all(f["steer"]["previous_response_id"] == steered_id for f in accepted)
    steered, successor = _ends(frames)
    assert steered["status"] == "completed" and steered["output"][0]["content"][0]["text"] == " ".join(
        f"w{i}" for i in range(20)
    )
    assert successor["previous_response_id"] == steered_id
    assert successor["output"][0]["content"][0]["text"] == "Echo: two"  # (the fake echoes the last user message)


def test_a_steer_of_a_store_false_response_continues_from_the_socket_s_memory(
    raw_socket: Connection, fake: FakeRuntime
) -> None:
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": SLOW_REASONING, "store": False}))
    first = _frames_until(raw_socket, lambda f: "reasoning" in f["type"] and "delta" in f["type"])
    steered_id = first[0]["response"]["id"]
    fake.reset()
    raw_socket.send(
        json.dumps({"type": "response.steer", "previous_response_id": steered_id, "input": "Use Postgres."})
    )
    steered, successor = _ends(_until_ends(raw_socket, 2, first))
    assert steered["incomplete_details"] == {"reason": "steered"}
    assert successor["status"] == "completed" and successor["previous_response_id"] is None  # (stored nowhere)
    [request] = [r for r in fake.requests() if "Use Postgres." in json.dumps(r["messages"])]
    # Its context from the socket's memory: the steered response's input (its reasoning alone
    # reaches no chat model), then the steer.
    assert [(m["role"], m["content"]) for m in request["messages"]] == [
        ("user", SLOW_REASONING),
        ("user", "Use Postgres."),
    ]


def test_a_response_waiting_for_tool_output_keeps_its_steer_for_the_next_create(
    client: openai.OpenAI, raw_socket: Connection, fake: FakeRuntime
) -> None:
    script = "#fake " + json.dumps(
        {"tool_calls": [{"name": "lookup", "arguments": '{"q": "plum"}'}], "delay": 0.3, "then": {"text": "found"}}
    )
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": script, "tools": [LOOKUP]}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.output_item.added")
    called_id = first[0]["response"]["id"]
    raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": called_id, "input": "and hurry"}))
    frames = _frames_until(raw_socket, lambda f: f["type"] == "response.steer.pending")
    [called] = _ends(frames)
    assert called["status"] == "completed" and called["output"][0]["type"] == "function_call"
    pending = frames[-1]
    assert pending["reason"] == "waiting_for_required_input"
    assert pending["steer"]["previous_response_id"] == called_id
    assert pending["required_input"] == [{"type": "function_call_output", "call_id": "call_0", "name": "lookup"}]
    # No successor of its own: the client's create naming it takes the steer, after the tool's
    # output (a user message between a call and its result is refused by strict chat templates).
    output = {"type": "function_call_output", "call_id": "call_0", "output": "plum: a fruit"}
    create = {"type": "response.create", "model": "fake", "tools": [LOOKUP], "previous_response_id": called_id}
    raw_socket.send(json.dumps({**create, "input": [output, {"role": "user", "content": "thanks"}]}))
    [answered] = _ends(_until_ends(raw_socket, 1))
    assert answered["previous_response_id"] == called_id and answered["status"] == "completed"
    new_input = client.responses.input_items.list(answered["id"], order="asc").data[-3:]
    assert [(item.type, getattr(item, "role", None)) for item in new_input] == [
        ("function_call_output", None),
        ("message", "user"),
        ("message", "user"),
    ]
    sent = fake.requests()[-1]["messages"]
    assert [m["role"] for m in sent[-4:]] == ["assistant", "tool", "user", "user"]  # call, result, steer, input
    assert "and hurry" in str(sent[-2]["content"]) and "thanks" in str(sent[-1]["content"])


def test_steers_whose_create_is_refused_fail_with_their_ids(raw_socket: Connection) -> None:
    """The client's create that was to take the pending steers is refused: the steers are handed
    back (`successor_creation_failed`), besides the create's own error."""
    script = "#fake " + json.dumps({"tool_calls": [{"name": "lookup", "arguments": "{}"}], "delay": 0.3})
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": script, "tools": [LOOKUP]}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.output_item.added")
    called_id = first[0]["response"]["id"]
    raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": called_id, "input": "later"}))
    frames = _frames_until(raw_socket, lambda f: f["type"] == "response.steer.pending")
    [accepted] = [f for f in frames if f["type"] == "response.steer.accepted"]
    create = {"type": "response.create", "model": "fake", "tools": [LOOKUP], "previous_response_id": called_id}
    raw_socket.send(json.dumps({**create, "input": "no tool output"}))  # (its call is left unanswered: a 400)
    failed, error = _frames_until(raw_socket, lambda f: f["type"] == "error")
    assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"] == {"id": accepted["steer"]["id"], "previous_response_id": called_id, "input": "later"}
    assert error["status"] == 400


def test_a_steered_tool_call_stream_is_cut_before_its_next_call(raw_socket: Connection) -> None:
    """Two calls: the steer ends the answer once the first is whole; the response waits for that one."""
    calls = [{"name": "lookup", "arguments": '{"q": "a"}'}, {"name": "lookup", "arguments": '{"q": "b"}'}]
    script = "#fake " + json.dumps({"tool_calls": calls, "delay": 0.3})
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": script, "tools": [LOOKUP]}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.output_item.added")
    target = first[0]["response"]["id"]
    raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": target, "input": "stop"}))
    frames = first + _frames_until(raw_socket, lambda f: f["type"] == "response.steer.pending")
    [steered] = _ends(frames)
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    assert [(i["type"], i["call_id"], i["status"]) for i in steered["output"]] == [
        ("function_call", "call_0", "completed")
    ]
    assert [f["item"]["call_id"] for f in frames if f["type"] == "response.output_item.added"] == ["call_0"]


@pytest.mark.parametrize(
    ("create", "code"),
    [
        ({"conversation": None}, "steering_not_supported"),
        ({"context_management": [{"type": "compaction", "compact_threshold": 100000}]}, "steering_not_supported"),
    ],
)
def test_what_cannot_be_steered_is_refused_and_runs_on(
    client: openai.OpenAI, raw_socket: Connection, create: dict[str, Any], code: str
) -> None:
    if "conversation" in create:
        create = {"conversation": client.conversations.create().id}
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": SLOW_TEXT, **create}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.output_text.delta")
    target = first[0]["response"]["id"]
    raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": target, "input": "x"}))
    frames = _until_ends(raw_socket, 1, first)
    [failed] = [f for f in frames if f["type"] == "response.steer.failed"]
    assert failed["error"]["code"] == code and failed["error"]["type"] == "invalid_request_error"
    assert failed["steer"] == {"previous_response_id": target, "input": "x"}
    assert _ends(frames)[0]["status"] == "completed"


def test_bad_steers_are_refused_naming_why_and_the_socket_stays_usable(raw_socket: Connection) -> None:
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": "done soon"}))
    [ended] = _ends(_until_ends(raw_socket, 1))
    slow = {"type": "response.create", "model": "fake", "input": SLOW_TEXT}
    raw_socket.send(json.dumps(slow))
    running = _frames_until(raw_socket, lambda f: f["type"] == "response.output_text.delta")[0]["response"]["id"]
    cases = [
        ({"previous_response_id": "resp_unknown", "input": "x"}, "response_not_found"),
        ({"previous_response_id": ended["id"], "input": "x"}, "response_already_completed"),
        ({"previous_response_id": running, "input": []}, "invalid_input"),
        ({"previous_response_id": running, "input": 7}, "invalid_input"),
        ({"previous_response_id": running, "input": [{"role": "assistant", "content": "no"}]}, "invalid_input"),
        (
            {
                "previous_response_id": running,
                "input": [{"type": "function_call_output", "call_id": "c", "output": "o"}],
            },
            "invalid_input",
        ),
        ({"previous_response_id": running, "input": "x", "stream_id": "a"}, "invalid_input"),
        ({"previous_response_id": running, "input": "x", "model": "fake"}, "invalid_input"),
        ({"input": "x"}, "response_not_found"),
    ]
    frames: list[dict[str, Any]] = []
    for steer, code in cases:
        raw_socket.send(json.dumps({"type": "response.steer", **steer}))
        frames += _frames_until(raw_socket, lambda f: f["type"] == "response.steer.failed")
        refused = frames[-1]
        assert refused["error"]["code"] == code, (steer, refused)
        assert refused["steer"]["input"] == steer.get("input") and "id" not in refused["steer"]
    frames = _until_ends(raw_socket, 1, frames)
    assert not [f for f in frames if f["type"] == "response.steer.accepted"]
    assert _ends(frames)[0]["status"] == "completed"  # not steered by any of them


def test_too_many_steers_are_refused(raw_socket: Connection) -> None:
    slow = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(40)), "delay": 0.1})
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": slow}))
    target = _frames_until(raw_socket, lambda f: f["type"] == "response.output_text.delta")[0]["response"]["id"]
    for n in range(17):
        raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": target, "input": f"s{n}"}))
    answers = _frames_until(raw_socket, lambda f: f["type"] == "response.steer.failed")
    assert [f["type"] for f in answers if f["type"].startswith("response.steer")].count("response.steer.accepted") == 16
    assert answers[-1]["error"]["code"] == "too_many_pending_steers" and answers[-1]["steer"]["input"] == "s16"
    _until_ends(raw_socket, 2, answers)  # (the response, then its successor of 16 messages)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_steer_survives_the_worker_that_heard_it(
    database_of_its_own: Environment, fake: FakeRuntime, stop: int
) -> None:
    """The worker running a steered response dies (or shuts down) before the boundary: the worker
    that continues it reads the steer from Postgres, ends the response at the boundary, and the
    successor answers the steer. (Its worker is killed: a database of its own, as
    tests/e2e/conftest.py `database_of_its_own` says why.)"""
    environment = database_of_its_own
    words = " ".join(f"w{i}" for i in range(60))
    script = "#fake " + json.dumps(
        {"text": words, "delay": 0.05, "tool_calls": [{"name": "lookup", "arguments": "{}"}]}
    )
    fake.reset()
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="30") as stack:
        workers = two_workers(stack, environment)
        url = f"ws://127.0.0.1:{stack.port}/v1/responses"
        with connect(url, additional_headers={"Authorization": f"Bearer {stack.client.api_key}"}) as socket:
            create = {"type": "response.create", "model": "continuing-model", "input": script, "tools": [LOOKUP]}
            socket.send(json.dumps(create))
            first = _frames_until(socket, lambda f: f["type"] == "response.output_text.delta")
            steered_id = first[0]["response"]["id"]
            socket.send(json.dumps({"type": "response.steer", "previous_response_id": steered_id, "input": "Stop."}))
            frames = first + _frames_until(socket, lambda f: f["type"] == "response.steer.accepted")
            running_worker(environment, steered_id, workers).send_signal(stop)
            frames = _until_ends(socket, 2, frames)
    steered, successor = _ends(frames)
    assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
    # Continued to the message's end (the boundary), and no further: the call never began.
    assert [(i["type"], i["content"][0]["text"]) for i in steered["output"]] == [("message", words)]
    assert successor["previous_response_id"] == steered_id
    assert successor["output"][0]["content"][0]["text"] == "Echo: Stop."
    continuations = [r for r in fake.requests() if r.get("continue_final_message")]
    assert len(continuations) == 1  # (it was continued, not run again)
    successor_at = next(n for n, f in enumerate(frames) if f["type"] == "response.created" and n > 0)
    numbers = [f["sequence_number"] for f in frames[:successor_at] if not f["type"].startswith("response.steer")]
    assert numbers == list(range(len(numbers)))  # one unbroken stream across the handover


def test_a_steer_during_an_mcp_call_lets_the_call_end_and_asks_the_model_no_more(
    raw_socket: Connection, fake: FakeRuntime, mcp_server: McpTestServer
) -> None:
    tool = {"type": "mcp", "server_label": "tools", "server_url": mcp_server.url, "require_approval": "never"}
    script = "#fake " + json.dumps({"tool_calls": [mcp_call("slow", seconds=1.5)], "then": {"text": "more"}})
    fake.reset()
    raw_socket.send(json.dumps({"type": "response.create", "model": "fake", "input": script, "tools": [tool]}))
    first = _frames_until(raw_socket, lambda f: f["type"] == "response.mcp_call.in_progress")
    target = first[0]["response"]["id"]
    raw_socket.send(json.dumps({"type": "response.steer", "previous_response_id": target, "input": "Enough."}))
    steered, successor = _ends(_until_ends(raw_socket, 2, first))
    assert steered["incomplete_details"] == {"reason": "steered"}
    assert [(i["type"], i.get("status")) for i in steered["output"]] == [
        ("mcp_list_tools", None),
        ("mcp_call", "completed"),
    ]
    assert mcp_server.calls["slow"] == 1  # the call it was making ended; the model was not asked again
    assert successor["output"][-1]["content"][0]["text"] == "Echo: Enough."
    assert len(fake.requests()) == 2  # the steered response's one answer, then its successor's

"""The Conversations API through the OpenAI SDK: every route, its pagination and its bad input
(a 4xx naming the parameter, nothing changed), responses created in a conversation in every mode,
what the model is sent, one response at a time, and accounts as walls."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

import openai
import pytest

from tests.api.conftest import InProcess
from tests.conftest import Environment, FakeRuntime


def said(text: str) -> Any:  # (an input item, as the SDK takes one)
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def texts(items: Any) -> list[str]:
    return [part.text for item in items for part in item.content if hasattr(part, "text")]


def test_a_conversation_is_created_read_updated_listed_and_deleted(client: openai.OpenAI) -> None:
    created = client.conversations.create(metadata={"topic": "demo"}, items=[said("one"), said("two")])
    assert created.id.startswith("conv_") and created.object == "conversation"
    assert created.metadata == {"topic": "demo"} and abs(created.created_at - time.time()) < 60
    assert client.conversations.retrieve(created.id).model_dump() == created.model_dump()
    updated = client.conversations.update(created.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}
    added = client.conversations.items.create(created.id, items=[said("three"), said("four")])
    assert [item.id for item in added.data] and added.has_more is False
    assert texts(client.conversations.items.list(created.id, order="asc")) == ["one", "two", "three", "four"]
    assert texts(client.conversations.items.list(created.id)) == ["four", "three", "two", "one"]  # desc by default
    first = client.conversations.items.list(created.id, order="asc", limit=2)
    assert texts(first.data) == ["one", "two"] and first.has_more
    rest = client.conversations.items.list(created.id, order="asc", after=str(first.last_id))
    assert texts(rest.data) == ["three", "four"] and not rest.has_more
    assert texts(client.conversations.items.list(created.id, order="desc", after=str(rest.data[0].id)).data) == [
        "two",
        "one",
    ]
    second = first.data[1]
    assert client.conversations.items.retrieve(str(second.id), conversation_id=created.id).model_dump() == (
        second.model_dump()
    )
    after_delete = client.conversations.items.delete(str(second.id), conversation_id=created.id)
    assert after_delete.id == created.id and after_delete.object == "conversation"
    assert texts(client.conversations.items.list(created.id, order="asc")) == ["one", "three", "four"]
    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)


def test_every_page_of_a_long_conversation_is_read_in_order_both_ways(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    for start in range(0, 60, 20):
        client.conversations.items.create(conversation.id, items=[said(f"m{n}") for n in range(start, start + 20)])
    orders: list[tuple[Literal["asc", "desc"], list[str]]] = [
        ("asc", [f"m{n}" for n in range(60)]),
        ("desc", [f"m{n}" for n in reversed(range(60))]),
    ]
    for order, expected in orders:
        page = client.conversations.items.list(conversation.id, order=order, limit=7)
        seen = texts(page.data)
        while page.has_more:
            page = client.conversations.items.list(conversation.id, order=order, limit=7, after=str(page.last_id))
            seen += texts(page.data)
        assert seen == expected


BAD = [
    ("POST", "/conversations", {"items": [said("x")] * 21}, 400, "items"),
    ("POST", "/conversations", {"items": [{"type": "message", "role": "robot", "content": "x"}]}, 400, "items[0].role"),
    ("POST", "/conversations", {"metadata": {f"k{n}": "v" for n in range(17)}}, 400, "metadata"),
    ("POST", "/conversations", {"bogus": 1}, 400, "bogus"),
    ("POST", "/conversations/{id}", {}, 400, "metadata"),
    ("POST", "/conversations/{id}/items", {"items": []}, 400, "items"),
    ("POST", "/conversations/{id}/items", {"items": [{"type": "item_reference", "id": "msg_1"}]}, 400, "items[0].id"),
    ("GET", "/conversations/{id}/items?limit=0", None, 400, "limit"),
    ("GET", "/conversations/{id}/items?limit=101", None, 400, "limit"),
    ("GET", "/conversations/{id}/items?order=sideways", None, 400, "order"),
    ("GET", "/conversations/{id}/items?after=msg_nowhere", None, 400, "after"),
    ("GET", "/conversations/{id}/items?include[]=nonsense", None, 400, "include[0]"),
    ("GET", "/conversations/conv_unknown", None, 404, None),
    ("POST", "/conversations/conv_unknown", {"metadata": {}}, 404, None),
    ("DELETE", "/conversations/conv_unknown", None, 404, None),
    ("GET", "/conversations/conv_unknown/items", None, 404, None),
    ("POST", "/conversations/conv_unknown/items", {"items": [said("x")]}, 404, None),
    ("GET", "/conversations/{id}/items/msg_unknown", None, 404, None),
    ("DELETE", "/conversations/{id}/items/msg_unknown", None, 404, None),
    ("GET", "/conversations/conv_%00", None, 404, None),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "param"), BAD)
def test_bad_requests_are_refused_naming_the_parameter_and_change_nothing(
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    param: str | None,
    server: InProcess,
    client: openai.OpenAI,
    api_key: str,
) -> None:
    conversation = client.conversations.create(metadata={"k": "v"}, items=[said("kept")])
    answer = server.http.request(
        method,
        server.base_url + path.replace("{id}", conversation.id),
        headers={"Authorization": f"Bearer {api_key}"},
        json=body,
    )
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert client.conversations.retrieve(conversation.id).metadata == {"k": "v"}
    assert texts(client.conversations.items.list(conversation.id)) == ["kept"]


def test_a_response_in_a_conversation_sees_its_items_then_its_input_and_joins_it(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    conversation = client.conversations.create(items=[said("earlier")])
    first = client.responses.create(model="fake", input="hello", conversation=conversation.id)
    assert first.status == "completed" and first.conversation is not None and first.conversation.id == conversation.id
    sent = fake.requests()[-1]["messages"]
    assert [m["content"] for m in sent] == ["earlier", "hello"]
    listed = client.conversations.items.list(conversation.id, order="asc")
    assert [item.type for item in listed] == ["message", "message", "message"]
    assert texts(listed) == ["earlier", "hello", "Echo: hello"]
    assert listed.data[2].id == first.output[0].id  # the response's own item, not a copy
    # The next turn, streamed, sees the first: its input and its answer.
    events = list(
        client.responses.create(model="fake", input="again", conversation={"id": conversation.id}, stream=True)
    )
    assert events[-1].type == "response.completed" and events[-1].response.conversation.id == conversation.id
    assert [m["content"] for m in fake.requests()[-1]["messages"]] == ["earlier", "hello", "Echo: hello", "again"]
    # In the background too; what input_items lists is the new turn only.
    third = client.responses.create(model="fake", input="third", conversation=conversation.id, background=True)
    for _ in range(200):
        if client.responses.retrieve(third.id).status == "completed":
            break
        time.sleep(0.05)
    assert texts(client.responses.input_items.list(third.id)) == ["third"]
    assert texts(client.conversations.items.list(conversation.id, order="asc"))[-2:] == ["third", "Echo: third"]


def sent_texts(fake: FakeRuntime) -> list[str]:
    return [m["content"] for m in fake.requests()[-1]["messages"]]


def test_a_deleted_item_is_not_sent_to_the_model_again(client: openai.OpenAI, fake: FakeRuntime) -> None:
    conversation = client.conversations.create(items=[said("secret"), said("public")])
    client.responses.create(model="fake", input="first", conversation=conversation.id)
    assert sent_texts(fake) == ["secret", "public", "first"]
    [secret, *_] = client.conversations.items.list(conversation.id, order="asc").data
    client.conversations.items.delete(str(secret.id), conversation_id=conversation.id)
    client.responses.create(model="fake", input="go", conversation=conversation.id)
    assert sent_texts(fake) == ["public", "first", "Echo: first", "go"]


def test_a_deleted_response_takes_its_items_out_of_the_conversation(client: openai.OpenAI, fake: FakeRuntime) -> None:
    conversation = client.conversations.create()
    regretted = client.responses.create(model="fake", input="regretted", conversation=conversation.id)
    client.responses.create(model="fake", input="kept", conversation=conversation.id)
    client.responses.delete(regretted.id)
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == ["kept", "Echo: kept"]
    client.responses.create(model="fake", input="next", conversation=conversation.id)
    assert sent_texts(fake) == ["kept", "Echo: kept", "next"]


def test_items_added_between_turns_reach_the_next_turn_in_order(client: openai.OpenAI, fake: FakeRuntime) -> None:
    conversation = client.conversations.create(items=[said("a")])
    client.responses.create(model="fake", input="b", conversation=conversation.id)
    client.conversations.items.create(conversation.id, items=[said("c"), said("d")])
    client.responses.create(model="fake", input="e", conversation=conversation.id)
    assert sent_texts(fake) == ["a", "b", "Echo: b", "c", "d", "e"]
    client.responses.create(model="fake", input="f", conversation=conversation.id)
    assert sent_texts(fake) == ["a", "b", "Echo: b", "c", "d", "e", "Echo: e", "f"]


def test_a_tool_call_and_its_output_inside_a_conversation(client: openai.OpenAI, fake: FakeRuntime) -> None:
    conversation = client.conversations.create()
    tool: Any = {"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}
    script = "#fake " + json.dumps({"tool_calls": [{"name": "weather", "arguments": "{}"}], "then": {"text": "Sunny."}})
    called = client.responses.create(model="fake", input=script, tools=[tool], conversation=conversation.id)
    [call] = called.output
    output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "22 C"}
    answered = client.responses.create(model="fake", input=[output], tools=[tool], conversation=conversation.id)
    assert answered.output_text == "Sunny."
    messages = fake.requests()[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "weather" and messages[-1]["role"] == "tool"
    assert [item.type for item in client.conversations.items.list(conversation.id, order="asc")] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


def test_previous_response_id_with_a_conversation_or_store_false_is_refused_and_stores_nothing(
    client: openai.OpenAI, environment: Environment
) -> None:
    conversation = client.conversations.create()
    earlier = client.responses.create(model="fake", input="x")
    for extra, param in (({"previous_response_id": earlier.id}, "conversation"), ({"store": False}, "store")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="fake", input="mixed up", conversation=conversation.id, **extra)
        assert refused.value.body["param"] == param
    assert environment.query("SELECT 1 FROM items WHERE payload::text LIKE '%mixed up%'") == []
    assert client.conversations.items.list(conversation.id).data == []


def test_one_response_runs_on_a_conversation_at_a_time(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    slow = "#fake " + json.dumps({"text": "a b c d e f", "delay": 0.3})
    running = client.responses.create(model="fake", input=slow, conversation=conversation.id, background=True)
    attempts: list[Callable[[], object]] = [
        lambda: client.responses.create(model="fake", input="too soon", conversation=conversation.id),
        lambda: client.conversations.items.create(conversation.id, items=[said("too soon")]),
    ]
    for attempt in attempts:
        with pytest.raises(openai.BadRequestError) as locked:
            attempt()
        assert locked.value.body["code"] == "conversation_locked"
        assert locked.value.body["param"] == "conversation"
    while client.responses.retrieve(running.id).status != "completed":
        time.sleep(0.05)
    after = client.responses.create(model="fake", input="now", conversation=conversation.id)
    assert after.status == "completed"
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == [
        slow,
        "a b c d e f",
        "now",
        "Echo: now",
    ]


def test_a_failed_or_cancelled_response_adds_nothing_and_frees_the_conversation(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(items=[said("kept")])
    failing = "#fake " + json.dumps({"status": 500, "fail_times": 99})
    failed = client.responses.create(model="fake", input=failing, conversation=conversation.id, background=True)
    while client.responses.retrieve(failed.id).status not in ("failed", "completed"):
        time.sleep(0.05)
    assert client.responses.retrieve(failed.id).status == "failed"
    slow = "#fake " + json.dumps({"text": "a b c d e f g h", "delay": 0.3})
    cancelled = client.responses.create(model="fake", input=slow, conversation=conversation.id, background=True)
    assert client.responses.cancel(cancelled.id).status == "cancelled"
    assert texts(client.conversations.items.list(conversation.id)) == ["kept"]
    assert client.responses.create(model="fake", input="next", conversation=conversation.id).status == "completed"


def test_another_accounts_conversation_answers_as_an_unknown_one(
    client: openai.OpenAI, other_client: openai.OpenAI
) -> None:
    conversation = client.conversations.create(items=[said("mine")])
    [item] = client.conversations.items.list(conversation.id).data
    attempts: list[Callable[[], object]] = [
        lambda: other_client.conversations.retrieve(conversation.id),
        lambda: other_client.conversations.update(conversation.id, metadata={"x": "y"}),
        lambda: other_client.conversations.items.list(conversation.id),
        lambda: other_client.conversations.items.create(conversation.id, items=[said("theirs")]),
        lambda: other_client.conversations.items.retrieve(str(item.id), conversation_id=conversation.id),
        lambda: other_client.conversations.items.delete(str(item.id), conversation_id=conversation.id),
        lambda: other_client.conversations.delete(conversation.id),
        lambda: other_client.responses.create(model="fake", input="x", conversation=conversation.id),
    ]
    unknown = "conv_" + "0" * 48
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as foreign:
            attempt()
        message = foreign.value.body["message"]
        assert message == f"Conversation with id '{conversation.id}' not found."
    with pytest.raises(openai.NotFoundError) as missing:
        client.conversations.retrieve(unknown)
    assert missing.value.body["message"] == f"Conversation with id '{unknown}' not found."
    assert texts(client.conversations.items.list(conversation.id)) == ["mine"]

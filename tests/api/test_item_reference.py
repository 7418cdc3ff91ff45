"""`item_reference` input items: a stored item of the caller's, named by its id (with or without
`type`), is that item in the new input, for a create and for a conversation's items; another
account's item, an unknown one, or one of a `store: false` response is a 400 naming it, and
nothing is stored."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, rows_written_since, write_mark


def test_a_reference_is_the_item_it_names(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input="Remember the word: lantern.")
    [asked] = client.responses.input_items.list(first.id).data
    answer = first.output[0]
    refs: Any = [{"type": "item_reference", "id": asked.id}, {"id": answer.id}, "What was the word?"]
    response = client.responses.create(model="fake", input=[*refs[:2], {"role": "user", "content": refs[2]}])
    sent = fake.requests()[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent[-3:]] == [
        ("user", "Remember the word: lantern."),
        ("assistant", "Echo: Remember the word: lantern."),
        ("user", "What was the word?"),
    ]
    listed = client.responses.input_items.list(response.id, order="asc").data
    assert [item.type for item in listed] == ["message", "message", "message"]
    assert listed[0].id not in (asked.id, answer.id)  # (its own id, as every sent item)
    assert listed[1].model_dump()["content"][0]["text"] == "Echo: Remember the word: lantern."


def test_a_conversation_item_can_be_named_and_a_conversation_can_take_references(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "The door code is 4711."}])
    [held] = client.conversations.items.list(conversation.id).data
    reference: Any = {"type": "item_reference", "id": held.id}
    client.responses.create(model="fake", input=[reference])
    assert "4711" in str(fake.requests()[-1]["messages"][-1]["content"])
    other = client.conversations.create()
    added = client.conversations.items.create(other.id, items=[reference])
    assert added.data[0].type == "message" and "4711" in str(added.data[0].model_dump()["content"])


@pytest.mark.parametrize("whose", ["another account's", "unknown", "a store=false response's"])
def test_an_item_the_caller_does_not_hold_is_a_400_naming_it(
    client: openai.OpenAI, other_client: openai.OpenAI, environment: Environment, whose: str
) -> None:
    if whose == "another account's":
        item_id = other_client.responses.create(model="fake", input="secret").output[0].id
    elif whose == "unknown":
        item_id = "msg_" + "0" * 48
    else:
        item_id = client.responses.create(model="fake", input="not kept", store=False).output[0].id
    mark = write_mark(environment)
    reference: Any = {"type": "item_reference", "id": item_id}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input=[reference])
    assert refused.value.body["param"] == "input[0].id" and item_id in refused.value.body["message"]
    assert rows_written_since(environment, mark)[:2] == (0, 0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.create(items=[reference])
    assert refused.value.body["param"] == "items[0].id"


def test_a_malformed_reference_is_a_400_naming_it(client: openai.OpenAI) -> None:
    reference: Any = {"type": "item_reference", "id": ""}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input=[reference])
    assert refused.value.body["param"] == "input[0].id"

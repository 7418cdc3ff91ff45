"""Idempotency-Key (design invariant 4): a create sent again with its key answers with what the
first created, in every mode, and never generates twice; another request with the key is a 409
naming the header; keys are the account's own and free again after 24 hours."""

from __future__ import annotations

import secrets
from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, wait_until


def keyed(key: str | None = None) -> dict[str, Any]:
    return {"extra_headers": {"Idempotency-Key": key or secrets.token_hex(8)}}


def generations(fake: FakeRuntime) -> int:
    return len(fake.requests())


def test_a_json_create_sent_again_is_answered_with_the_same_response(client: openai.OpenAI, fake: FakeRuntime) -> None:
    key = keyed()
    first = client.responses.create(model="fake", input="hello", **key)
    again = client.responses.create(model="fake", input="hello", **key)
    assert again.id == first.id and again.output_text == first.output_text == "Echo: hello"
    assert generations(fake) == 1


def test_a_stream_sent_again_replays_the_same_events(client: openai.OpenAI, fake: FakeRuntime) -> None:
    key = keyed()
    first = [e.model_dump() for e in client.responses.create(model="fake", input="hello", stream=True, **key)]
    again = [e.model_dump() for e in client.responses.create(model="fake", input="hello", stream=True, **key)]
    for event in first + again:
        event.pop("obfuscation", None)  # (padding cut anew for each stream)
    assert again == first and first[-1]["type"] == "response.completed"
    assert generations(fake) == 1


def test_a_background_create_sent_again_answers_the_response_as_it_is_now(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    key = keyed()
    script = '#fake {"text": "slow", "first_delay": 0.5}'
    first = client.responses.create(model="fake", input=script, background=True, **key)
    again = client.responses.create(model="fake", input=script, background=True, **key)
    assert again.id == first.id and again.status in ("queued", "in_progress")
    wait_until(lambda: client.responses.retrieve(first.id).status == "completed", timeout=20)
    later = client.responses.create(model="fake", input=script, background=True, **key)
    assert later.id == first.id and later.status == "completed" and later.output_text == "slow"
    assert generations(fake) == 1


def test_the_key_with_another_request_is_a_409_naming_it(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    key = keyed()
    client.responses.create(model="fake", input="hello", **key)
    before = environment.query("SELECT count(*) FROM responses")[0][0]
    with pytest.raises(openai.ConflictError) as caught:
        client.responses.create(model="fake", input="something else", **key)
    error: Any = caught.value.body
    assert (caught.value.status_code, error["param"], error["code"]) == (
        409,
        "Idempotency-Key",
        "idempotency_key_reused",
    )
    assert environment.query("SELECT count(*) FROM responses")[0][0] == before and generations(fake) == 1


@pytest.mark.parametrize("key", ["", "k" * 256, "tab\there"])
def test_a_malformed_key_is_a_400_naming_it(client: openai.OpenAI, fake: FakeRuntime, key: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="hello", extra_headers={"Idempotency-Key": key})
    assert caught.value.body["param"] == "Idempotency-Key"
    assert generations(fake) == 0


def test_without_the_header_every_create_runs(client: openai.OpenAI, fake: FakeRuntime) -> None:
    assert (
        client.responses.create(model="fake", input="hello").id
        != client.responses.create(model="fake", input="hello").id
    )
    assert generations(fake) == 2


def test_keys_are_an_accounts_own(client: openai.OpenAI, other_client: openai.OpenAI, fake: FakeRuntime) -> None:
    key = keyed()
    mine = client.responses.create(model="fake", input="hello", **key)
    theirs = other_client.responses.create(model="fake", input="hello", **key)
    assert mine.id != theirs.id and generations(fake) == 2


def test_a_key_older_than_a_day_is_free_again(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    key = keyed()
    first = client.responses.create(model="fake", input="hello", **key)
    environment.query(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = $1",
        key["extra_headers"]["Idempotency-Key"],
    )
    assert client.responses.create(model="fake", input="other", **key).id != first.id


def test_an_unstored_response_cannot_be_answered_again_but_never_runs_twice(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    key = keyed()
    client.responses.create(model="fake", input="hello", store=False, **key)
    with pytest.raises(openai.ConflictError) as caught:
        client.responses.create(model="fake", input="hello", store=False, **key)
    assert caught.value.body["code"] == "idempotency_key_unreplayable"
    assert generations(fake) == 1


def test_conversations_and_their_items_are_created_once(client: openai.OpenAI, environment: Environment) -> None:
    key = keyed()
    first = client.conversations.create(metadata={"topic": "trip"}, **key)
    assert client.conversations.create(metadata={"topic": "trip"}, **key).id == first.id
    with pytest.raises(openai.ConflictError):  # the key is the account's: another route is another request
        client.conversations.items.create(first.id, items=[{"type": "message", "role": "user", "content": "x"}], **key)
    items: Any = [{"type": "message", "role": "user", "content": "one"}]
    key = keyed()
    added = client.conversations.items.create(first.id, items=items, **key)
    again = client.conversations.items.create(first.id, items=items, **key)
    assert [i.id for i in again.data] == [i.id for i in added.data]
    assert len(client.conversations.items.list(first.id).data) == 1


def test_a_compaction_sent_again_is_the_same_compaction(client: openai.OpenAI, fake: FakeRuntime) -> None:
    key = keyed()
    first = client.responses.compact(model="fake", input="Plan a trip.", **key)
    again = client.responses.compact(model="fake", input="Plan a trip.", **key)
    assert again.id == first.id and again.output[-1].id == first.output[-1].id
    assert generations(fake) == 1

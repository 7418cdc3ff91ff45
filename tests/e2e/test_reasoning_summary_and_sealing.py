"""Reasoning as clients ask for it: as a summary (`reasoning.summary`), and sealed for a
`store: false` client to send back (`include: ["reasoning.encrypted_content"]`)."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest
from cryptography.fernet import Fernet

from tests.conftest import Environment, FakeRuntime, api_client

REASONING = "two plus two is four"
REASONS = "#fake " + json.dumps({"reasoning": REASONING, "text": "Four."})


def test_a_summary_streams_as_openai_streams_one(client: openai.OpenAI, fake: FakeRuntime) -> None:
    with client.responses.stream(model="fake", input=REASONS, reasoning={"summary": "auto"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == REASONING and not reasoning.content
    types = [e.type for e in events if "reasoning" in e.type]
    deltas = types.count("response.reasoning_summary_text.delta")  # one per chunk, or fewer merged ones
    texts = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(texts) == REASONING and types == [
        "response.reasoning_summary_part.added",
        *["response.reasoning_summary_text.delta"] * deltas,
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    assert all(e.summary_index == 0 for e in events if e.type.startswith("response.reasoning_summary"))
    assert final.reasoning is not None and final.reasoning.summary == "auto"
    assert client.responses.retrieve(final.id).output[0].summary[0].text == REASONING


def test_a_running_responses_summary_so_far_is_polled(client: openai.OpenAI, fake: FakeRuntime) -> None:
    slow = "#fake " + json.dumps({"reasoning": REASONING, "text": "Four. And more.", "delay": 0.3})
    response = client.responses.create(model="fake", input=slow, reasoning={"summary": "concise"}, background=True)
    deadline = time.monotonic() + 10
    summary = ""
    while summary != REASONING and time.monotonic() < deadline:
        polled = client.responses.retrieve(response.id)
        summary = polled.output[0].summary[0].text if polled.output and polled.output[0].summary else ""
        assert REASONING.startswith(summary)  # (each poll: the summary so far, as committed)
    # The whole summary was seen while the answer was still being written.
    assert summary == REASONING and polled.status == "in_progress"
    client.responses.cancel(response.id)


def sealed_turn(client: openai.OpenAI, **extra: Any) -> Any:
    return client.responses.create(
        model="fake", input=REASONS, store=False, include=["reasoning.encrypted_content"], **extra
    )


def send_back(client: openai.OpenAI, reasoning: dict[str, Any]) -> Any:
    return client.responses.create(
        model="fake",
        store=False,
        input=[
            {"role": "user", "content": "What is two plus two?"},
            reasoning,  # type: ignore[list-item]
            {"role": "assistant", "content": "Four."},
            {"role": "user", "content": "And three plus three?"},
        ],
    )


def test_sealed_reasoning_goes_back_to_the_model_with_nothing_kept(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    first = sealed_turn(client)
    reasoning = first.output[0].to_dict()
    assert reasoning["encrypted_content"] and REASONING not in reasoning["encrypted_content"]
    send_back(client, {**reasoning, "content": []})
    assert fake.requests()[-1]["messages"][1] == {
        "role": "assistant",
        "content": "Four.",
        "reasoning_content": REASONING,
    }
    assert environment.query("SELECT id FROM responses WHERE id = $1", first.id) == []


def test_reasoning_is_sealed_only_when_asked(client: openai.OpenAI, fake: FakeRuntime) -> None:
    assert client.responses.create(model="fake", input=REASONS).output[0].encrypted_content is None


@pytest.mark.parametrize(
    "token",
    [
        "not-a-token",
        Fernet(Fernet.generate_key()).encrypt(REASONING.encode()).decode(),  # another deployment's key
    ],
)
def test_foreign_or_altered_sealed_reasoning_is_refused(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment, token: str
) -> None:
    before = environment.query("SELECT count(*) FROM responses")
    with pytest.raises(openai.BadRequestError) as caught:
        send_back(client, {"type": "reasoning", "summary": [], "encrypted_content": token})
    assert (caught.value.body["param"], caught.value.body["code"]) == (
        "input[1].encrypted_content",
        "invalid_encrypted_content",
    )
    assert fake.requests() == [] and environment.query("SELECT count(*) FROM responses") == before


def test_a_sealed_token_altered_by_one_character_is_refused(client: openai.OpenAI, fake: FakeRuntime) -> None:
    token = sealed_turn(client).output[0].encrypted_content
    altered = token[:-8] + ("A" if token[-8] != "A" else "B") + token[-7:]
    with pytest.raises(openai.BadRequestError):
        send_back(client, {"type": "reasoning", "summary": [], "encrypted_content": altered})


def test_a_key_put_first_seals_and_the_old_one_still_opens(
    client: openai.OpenAI, environment: Environment, api_key: str, fake: FakeRuntime
) -> None:
    """Rotation: RESPONSES_ENCRYPTION_KEYS=new,old."""
    old_token = sealed_turn(client).output[0].encrypted_content
    keys = f"{Fernet.generate_key().decode()},{environment.env()['RESPONSES_ENCRYPTION_KEYS']}"
    with api_client(environment, api_key, RESPONSES_ENCRYPTION_KEYS=keys) as rotated:
        send_back(rotated, {"type": "reasoning", "summary": [], "encrypted_content": old_token})
        assert fake.requests()[-1]["messages"][1]["reasoning_content"] == REASONING


def test_an_api_without_a_key_refuses_a_sealed_token(environment: Environment, api_key: str, fake: FakeRuntime) -> None:
    with api_client(environment, api_key, RESPONSES_ENCRYPTION_KEYS="") as keyless:
        with pytest.raises(openai.BadRequestError) as caught:
            send_back(keyless, {"type": "reasoning", "summary": [], "encrypted_content": "token"})
        assert "no encryption key" in caught.value.body["message"]

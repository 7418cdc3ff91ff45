"""`truncation: "auto"`: a context longer than the model's loses its oldest whole turns, whether
the model's server counts prompts (measured before sending) or only refuses them (sent again
shorter); what was dropped stays stored and listed. The fake runtime counts a word as a token."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import FakeRuntime

WORDS = " ".join(["word"] * 60)  # a long turn: 60 tokens in, "Echo: …" 61 out


def prompt_tokens(request: dict[str, Any]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in request["messages"])


def texts_sent(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]).split(" ", 1)[0] for m in request["messages"]]


def chain(client: openai.OpenAI, model: str, turns: int, **create: Any) -> str:
    """`turns` long turns, each continuing the one before; the last one's id."""
    previous: str | None = None
    for turn in range(turns):
        response = client.responses.create(
            model=model, input=f"turn{turn} {WORDS}", previous_response_id=previous, **create
        )
        assert response.status == "completed", response.error
        previous = response.id
    assert previous is not None
    return previous


@pytest.mark.parametrize("wording", ["vllm", "sglang", "llamacpp", "plain"])
def test_a_server_that_refuses_a_long_prompt_gets_it_again_without_the_oldest_turns(
    client: openai.OpenAI, fake: FakeRuntime, wording: str
) -> None:
    previous = chain(client, "fake", 3)
    fake.reset()
    script = "#fake " + json.dumps({"context_window": 250, "context_wording": wording})
    response = client.responses.create(
        model="fake", input=f"{script}\nnow", previous_response_id=previous, truncation="auto"
    )
    assert response.status == "completed" and response.truncation == "auto"
    refused, *_, sent = fake.requests()
    assert prompt_tokens(refused) + refused["max_tokens"] > 250 >= prompt_tokens(sent) + sent["max_tokens"]
    assert texts_sent(sent)[0].startswith("turn") and texts_sent(sent)[-1] == "#fake"
    assert "turn0" not in texts_sent(sent)  # the oldest turn went first, whole: question and answer
    assert sent["messages"][0]["role"] == "user"
    assert len(fake.requests()) == 2  # sent again once, short enough
    # What was dropped is still stored and listed.
    listed = client.responses.input_items.list(response.id, order="asc")
    assert [str(item.content[0].text).split(" ", 1)[0] for item in listed][::2] == ["turn0", "turn1", "turn2", "#fake"]


def test_a_refusal_that_states_only_a_lower_bound_is_cut_until_the_prompt_fits(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    # vLLM 0.32 refuses only a prompt with no room left, stating "at least window + 1" tokens.
    previous = chain(client, "fake", 3)
    fake.reset()
    script = "#fake " + json.dumps({"context_window": 250, "context_wording": "vllm-0.32"})
    response = client.responses.create(
        model="fake", input=f"{script}\nnow", previous_response_id=previous, truncation="auto"
    )
    assert response.status == "completed"
    refused, *_, sent = fake.requests()
    assert prompt_tokens(refused) >= 250 > prompt_tokens(sent)
    assert "turn0" not in texts_sent(sent) and texts_sent(sent)[-1] == "#fake"


def test_truncation_disabled_keeps_context_length_exceeded(client: openai.OpenAI, fake: FakeRuntime) -> None:
    previous = chain(client, "fake", 3)
    script = "#fake " + json.dumps({"context_window": 250})
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input=f"{script}\nnow", previous_response_id=previous)
    assert caught.value.body["code"] == "context_length_exceeded"
    events = list(
        client.responses.create(
            model="fake", input=f"{script}\nnow", previous_response_id=previous, truncation="disabled", stream=True
        )
    )
    assert events[-1].type == "response.failed" and events[-1].response.truncation == "disabled"


def test_a_server_that_counts_prompts_is_sent_one_that_fits_with_room_for_the_answer(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    conversation = client.conversations.create()
    for turn in range(4):  # measured-model: a context of 400 tokens, answers of up to 64
        client.responses.create(
            model="measured-model", input=f"turn{turn} {WORDS}", conversation=conversation.id, truncation="auto"
        )
    fake.reset()
    script = "#fake " + json.dumps({"context_window": 400})  # it refuses what does not fit
    response = client.responses.create(
        model="measured-model", input=f"{script}\nnow", conversation=conversation.id, truncation="auto"
    )
    assert response.status == "completed"
    [sent] = fake.requests()  # measured, cut, then sent once
    assert prompt_tokens(sent) + sent["max_tokens"] <= 400 and sent["max_tokens"] == 64
    assert texts_sent(sent)[:2] == ["turn2", "Echo:"]  # the oldest whole turns went, no more
    assert response.usage is not None and response.usage.input_tokens == prompt_tokens(sent)
    assert len(client.conversations.items.list(conversation.id, limit=100).data) == 10  # all of it kept


def test_a_prompt_that_cannot_fit_is_not_sent_without_truncation(client: openai.OpenAI, fake: FakeRuntime) -> None:
    previous = chain(client, "measured-model", 2)
    fake.reset()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="measured-model", input=f"turn2 {WORDS} {WORDS} {WORDS}", previous_response_id=previous
        )
    assert caught.value.body["code"] == "context_length_exceeded"
    assert fake.requests() == []  # measured, and refused here


def test_a_tool_call_and_its_output_go_together(client: openai.OpenAI, fake: FakeRuntime) -> None:
    tool: Any = {"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}
    script = "#fake " + json.dumps({"tool_calls": [{"name": "weather", "arguments": "{}"}], "then": {"text": "Sunny."}})
    called = client.responses.create(model="measured-model", input=f"{script}\n{WORDS}", tools=[tool])
    output: Any = {"type": "function_call_output", "call_id": called.output[0].call_id, "output": f"22 C {WORDS}"}
    answered = client.responses.create(
        model="measured-model", input=[output], tools=[tool], previous_response_id=called.id
    )
    previous = answered.id
    for turn in range(2):
        previous = client.responses.create(
            model="measured-model", input=f"turn{turn} {WORDS}", previous_response_id=previous, truncation="auto"
        ).id
    sent = fake.requests()[-1]
    calls = {c["id"] for m in sent["messages"] for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in calls for m in sent["messages"] if m["role"] == "tool")
    assert sent["messages"][0]["role"] == "user"
    assert prompt_tokens(sent) + sent["max_tokens"] <= 400


def test_input_tokens_counts_what_truncation_would_send(client: openai.OpenAI) -> None:
    previous = chain(client, "measured-model", 3, truncation="auto")
    whole = client.responses.input_tokens.count(model="measured-model", previous_response_id=previous, input="now")
    cut = client.responses.input_tokens.count(
        model="measured-model", previous_response_id=previous, input="now", truncation="auto"
    )
    assert whole.input_tokens == 3 * (61 + 62) + 1
    assert cut.input_tokens == 2 * (61 + 62) + 1  # the first turn went: with room for 64, 370 did not fit

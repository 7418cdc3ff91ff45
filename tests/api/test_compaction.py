"""Compaction through the OpenAI SDK: POST /v1/responses/compact, what the model is asked and
later sent, the compaction as a stored response and as an item sent back, and bad input."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from app.protocol.sealing import Seal, new_key
from tests.conftest import TEST_ENCRYPTION_KEY, FakeRuntime, wait_until
from workers.translation.compaction import COMPACTION_PROMPT, SUMMARY_PREFIX

SEAL = Seal([TEST_ENCRYPTION_KEY])


def said(role: str, text: str) -> Any:
    return {"type": "message", "role": role, "content": text}


def sent(fake: FakeRuntime) -> list[tuple[str, str]]:
    """What the model was last sent: (role, text) of each message."""
    return [(m["role"], str(m.get("content") or "")) for m in fake.requests()[-1]["messages"]]


HISTORY = [
    said("user", "Plan a trip to Lisbon."),
    said("assistant", "Sure: when?"),
    said("user", "In May, for a week."),
    said("assistant", "Noted: May, one week."),
]


def test_compact_returns_the_user_messages_and_one_sealed_summary_last(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    compacted = client.responses.compact(model="fake", input=HISTORY)
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *kept, item = compacted.output
    assert [(m.type, m.role, m.content[0].text) for m in kept] == [
        ("message", "user", "Plan a trip to Lisbon."),
        ("message", "user", "In May, for a week."),
    ]
    assert item.type == "compaction" and item.id.startswith("cmp_")
    summary = SEAL.open(item.encrypted_content)
    assert summary.startswith("Echo: Write a summary") and "Lisbon" not in item.encrypted_content
    # The model was asked for it with our prompt, after the whole context.
    assert sent(fake)[-1] == ("user", COMPACTION_PROMPT)
    assert [text for _, text in sent(fake)[:-1]] == [str(m["content"]) for m in HISTORY]
    assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0
    # Stored: retrievable, and its input is listed, never its compaction item.
    stored = client.responses.retrieve(compacted.id)
    assert stored.status == "completed" and [o.type for o in stored.output] == ["compaction"]
    assert len(client.responses.input_items.list(compacted.id).data) == 4


def test_a_compaction_continued_sends_the_user_messages_then_the_summary(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    compacted = client.responses.compact(model="fake", input=HISTORY)
    summary = SEAL.open(str(compacted.output[-1].encrypted_content))
    after = client.responses.create(model="fake", input="Book it.", previous_response_id=compacted.id)
    assert after.status == "completed"
    assert sent(fake) == [
        ("user", "Plan a trip to Lisbon."),
        ("user", "In May, for a week."),
        ("user", f"{SUMMARY_PREFIX}\n\n{summary}"),
        ("user", "Book it."),
    ]
    listed = client.responses.input_items.list(after.id, order="asc")
    assert [i.type for i in listed] == ["message"] * 5  # the history and "Book it.": no compaction item


def test_a_compaction_item_sent_back_stands_for_what_it_summarized(client: openai.OpenAI, fake: FakeRuntime) -> None:
    compacted = client.responses.compact(model="fake", input=HISTORY)
    window: Any = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    answered = client.responses.create(model="fake", input=[*window, said("user", "Book it.")], store=False)
    assert answered.status == "completed"
    assert [role for role, _ in sent(fake)] == ["user", "user", "user", "user"]
    assert sent(fake)[2][1].startswith(SUMMARY_PREFIX)


def test_compacting_a_compacted_context_gives_one_compaction_item(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.compact(model="fake", input=HISTORY)
    turn = client.responses.create(model="fake", input="And hotels?", previous_response_id=first.id)
    second = client.responses.compact(model="fake", previous_response_id=turn.id)
    assert [o.type for o in second.output] == ["message", "message", "message", "compaction"]
    assert [m.content[0].text for m in second.output[:3]] == [
        "Plan a trip to Lisbon.",
        "In May, for a week.",
        "And hotels?",
    ]
    # The model summarized the earlier summary and what came after it.
    asked = sent(fake)
    assert asked[2][1].startswith(SUMMARY_PREFIX) and asked[-1] == ("user", COMPACTION_PROMPT)
    assert ("assistant", "Echo: And hotels?") in asked


def test_a_tool_call_and_its_output_are_folded_into_the_summary(client: openai.OpenAI, fake: FakeRuntime) -> None:
    call: Any = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"}
    output: Any = {"type": "function_call_output", "call_id": "call_1", "output": "22 C"}
    compacted = client.responses.compact(model="fake", input=[said("user", "Weather?"), call, output])
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    assert any(m.get("tool_calls") for m in fake.requests()[-1]["messages"])  # the model saw them to summarize
    client.responses.create(model="fake", input="Thanks.", previous_response_id=compacted.id)
    assert [role for role, _ in sent(fake)] == ["user", "user", "user"]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "fake"}, "input", "missing_required_parameter"),
        ({"input": "x"}, "model", "missing_required_parameter"),
        ({"model": "fake", "input": "x", "stream": True}, "stream", "unknown_parameter"),
        ({"model": "fake", "previous_response_id": "resp_nope"}, "previous_response_id", "previous_response_not_found"),
        ({"model": "fake", "input": []}, "input", "empty_array"),
        ({"model": "fake", "input": "x", "image": {"context_compression": "enabled"}}, "image.context_compression",
         "invalid_value"),
    ],
)  # fmt: skip
def test_bad_compact_requests_are_refused_naming_the_parameter(
    client: openai.OpenAI, fake: FakeRuntime, body: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.post("/responses/compact", body=body, cast_to=object)
    assert (caught.value.body["param"], caught.value.body["code"]) == (param, code)
    assert fake.requests() == []


@pytest.mark.parametrize("where", ["create", "compact"])
def test_a_tampered_or_foreign_compaction_item_is_refused_naming_it(
    client: openai.OpenAI, fake: FakeRuntime, where: str
) -> None:
    good = SEAL.seal("a summary")
    for token in (good[:-4] + "AAAA", Seal([new_key()]).seal("a summary")):
        item = {"type": "compaction", "encrypted_content": token}
        body = {"model": "fake", "input": [said("user", "hi"), item, said("user", "go on")]}
        with pytest.raises(openai.BadRequestError) as caught:
            client.post("/responses" if where == "create" else "/responses/compact", body=body, cast_to=object)
        error: Any = caught.value.body
        assert (error["param"], error["code"]) == ("input[1].encrypted_content", "invalid_encrypted_content")
    assert fake.requests() == []


def test_the_summary_reaches_the_model_only_through_its_item(client: openai.OpenAI, fake: FakeRuntime) -> None:
    item: Any = {"type": "compaction", "encrypted_content": SEAL.seal("They chose May.")}
    script = "#fake " + json.dumps({"text": "ok"})
    client.responses.create(model="fake", input=[said("assistant", "dropped"), item, said("user", script)])
    assert sent(fake) == [("user", f"{SUMMARY_PREFIX}\n\nThey chose May."), ("user", script)]


LONG = " ".join(["word"] * 60)


def test_a_context_past_the_threshold_is_compacted_before_it_is_answered(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    first = client.responses.create(model="fake", input=f"Remember {LONG}")
    fake.reset()
    events = list(
        client.responses.create(
            model="fake",
            input="What now?",
            previous_response_id=first.id,
            context_management=[{"type": "compaction", "compact_threshold": 50}],
            stream=True,
        )
    )
    kinds = [(e.type, getattr(e, "output_index", None)) for e in events]
    assert kinds[2:5] == [
        ("response.output_item.added", 0),
        ("response.compaction.compacting", 0),
        ("response.output_item.done", 0),
    ]
    # The turn being answered stays out of the summary, after it: the fake echoes its question.
    assert ("response.output_item.added", 1) in kinds and kinds[-1] == ("response.completed", None)
    response = events[-1].response
    assert [o.type for o in response.output] == ["compaction", "message"]
    assert response.output[0].id == events[2].item.id
    assert response.output_text == "Echo: What now?"
    summary_request, answer_request = fake.requests()
    assert summary_request["messages"][-1]["content"] == COMPACTION_PROMPT
    assert "What now?" not in json.dumps(summary_request["messages"])
    # The user's earlier words, the summary, then the turn.
    assert [m["role"] for m in answer_request["messages"]] == ["user", "user", "user"]
    assert answer_request["messages"][1]["content"].startswith(SUMMARY_PREFIX)
    assert answer_request["messages"][2]["content"] == "What now?"
    # Its usage counts both calls.
    prompts = sum(len(str(m["content"]).split()) for r in fake.requests() for m in r["messages"])
    assert response.usage is not None and response.usage.input_tokens == prompts
    # The next turn is sent the compacted context, then what followed.
    client.responses.create(model="fake", input="And then?", previous_response_id=response.id)
    assert [role for role, _ in sent(fake)] == ["user", "user", "user", "assistant", "user"]


def test_an_agent_s_pending_tool_call_stays_out_of_the_summary_and_is_answered_once(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    """A compaction on the turn that carries a tool's output: the model is sent the summary, then
    the turn (its question, its call, the output) and answers it, rather than calling again."""
    first = client.responses.create(model="fake", input=f"Remember {LONG}")
    call = {"name": "lookup", "arguments": "{}", "id": "call_weather"}
    script = "#fake " + json.dumps({"tool_calls": [call], "then": {"text": "It is sunny."}})
    tool: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    managed: Any = [{"type": "compaction", "compact_threshold": 50}]
    called = client.responses.create(model="fake", input=script, previous_response_id=first.id, tools=[tool])
    fake.reset()
    answered = client.responses.create(
        model="fake",
        input=[{"type": "function_call_output", "call_id": "call_weather", "output": "sunny"}],
        previous_response_id=called.id,
        tools=[tool],
        context_management=managed,
    )
    assert [o.type for o in answered.output] == ["compaction", "message"]  # no second call
    assert answered.output_text == "It is sunny."
    summary_request, answer_request = fake.requests()
    assert "call_weather" not in json.dumps(summary_request["messages"])
    roles = [m["role"] for m in answer_request["messages"]]
    assert roles == ["user", "user", "user", "assistant", "tool"]  # earlier words, summary, the turn
    # The next turn still sees that turn after the summary.
    client.responses.create(model="fake", input="Thanks.", previous_response_id=answered.id, tools=[tool])
    roles = [m["role"] for m in fake.requests()[-1]["messages"]]
    assert roles == ["user", "user", "user", "assistant", "tool", "assistant", "user"]


def test_a_context_that_would_not_fit_even_compacted_is_refused_before_any_summary(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    """The user's own messages stay whole through a compaction: when they alone leave the answer
    no room, the response fails at once (context_length_exceeded), no summary asked for."""
    first = client.responses.create(model="measured-model", input=" ".join(["word"] * 300))
    fake.reset()
    managed: Any = [{"type": "compaction", "compact_threshold": 100}]
    failed = client.responses.create(
        model="measured-model",
        input="And " + " ".join(["more"] * 60),
        previous_response_id=first.id,
        context_management=managed,
        background=True,
    )
    wait_until(lambda: client.responses.retrieve(failed.id).status == "failed")
    ended = client.responses.retrieve(failed.id)
    assert ended.error is not None and ended.error.model_dump()["code"] == "context_length_exceeded"
    assert not [r for r in fake.requests() if COMPACTION_PROMPT in json.dumps(r["messages"])]


def test_a_context_under_the_threshold_is_answered_as_it_is(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(
        model="fake", input="Short.", context_management=[{"type": "compaction", "compact_threshold": 1000}]
    )
    assert [o.type for o in response.output] == ["message"] and len(fake.requests()) == 1


def test_a_server_that_counts_tokens_decides_the_threshold(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="measured-model", input=f"Remember {LONG}")
    response = client.responses.create(
        model="measured-model",
        input="What now?",
        previous_response_id=first.id,
        context_management=[{"type": "compaction", "compact_threshold": 100}],  # 125 tokens, as it counts them
    )
    assert [o.type for o in response.output] == ["compaction", "message"]


@pytest.mark.parametrize(
    ("entries", "param"),
    [
        ([{"type": "summarize"}], "context_management[0].type"),
        ([{"type": "compaction", "compact_threshold": 0}], "context_management[0].compact_threshold"),
        ([{"type": "compaction"}, {"type": "compaction"}], "context_management"),
        ([{"type": "compaction", "every": 3}], "context_management[0].every"),
    ],
)
def test_bad_context_management_is_refused_naming_it(
    client: openai.OpenAI, fake: FakeRuntime, entries: Any, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="x", context_management=entries)
    assert caught.value.body["param"] == param
    assert fake.requests() == []

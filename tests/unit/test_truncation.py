"""`truncation: "auto"`: which turns a chat request loses, and what a refusal says."""

from __future__ import annotations

from typing import Any

import pytest

from workers.translation.truncation import Overflow, Turns, after_refusal, halved, shortened

SYSTEM = {"role": "system", "content": "be brief"}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def call(call_id: str) -> dict[str, Any]:
    function = {"name": "weather", "arguments": "{}"}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "22 C"}


def body(*messages: dict[str, Any], max_tokens: int = 10) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), "max_tokens": max_tokens}


def test_turns_start_at_user_messages_and_the_system_message_stays() -> None:
    turns = Turns.of([SYSTEM, user("a"), assistant("A"), user("b"), assistant("B"), user("c")])
    assert turns.head == [SYSTEM]
    assert turns.turns == [[user("a"), assistant("A")], [user("b"), assistant("B")], [user("c")]]
    assert turns.droppable == 2 and turns.without(2) == [SYSTEM, user("c")]


def test_a_tool_call_its_output_and_the_images_after_it_stay_in_one_turn() -> None:
    images = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}
    messages = [user("weather?"), call("c1"), user("meanwhile"), result("c1"), images, assistant("Sunny"), user("next")]
    assert Turns.of(messages).turns == [messages[:6], [user("next")]]


def test_history_that_opens_with_an_answer_is_a_turn_of_its_own() -> None:
    assert Turns.of([assistant("Hello!"), user("hi")]).turns == [[assistant("Hello!")], [user("hi")]]


def test_the_fewest_oldest_turns_holding_the_excess_go_and_never_the_last() -> None:
    long = "word " * 100
    request = body(SYSTEM, user(long), assistant("A"), user(long), assistant("B"), user("now"))
    one = shortened(request, excess_tokens=5, prompt_tokens=205)
    assert one is not None and one["messages"] == [SYSTEM, user(long), assistant("B"), user("now")]
    both = shortened(request, excess_tokens=150, prompt_tokens=205)
    assert both is not None and both["messages"] == [SYSTEM, user("now")]
    assert shortened(request, excess_tokens=10_000, prompt_tokens=205) == both  # the last turn stays
    assert shortened(body(SYSTEM, user("now")), excess_tokens=5, prompt_tokens=10) is None
    assert request["messages"][1] == user(long)  # the request it was given is left as it was


def test_halving_drops_the_oldest_turns_holding_half_of_what_may_go() -> None:
    turns = [m for n in range(4) for m in (user(f"question {n}"), assistant(f"answer {n}"))]
    halved_once = halved(body(*turns, user("now")))
    assert halved_once is not None and halved_once["messages"] == [*turns[4:], user("now")]
    assert halved(body(user("now"))) is None


@pytest.mark.parametrize(
    ("message", "prompt", "window"),
    [
        ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
         "(4900 in the messages, 100 in the completion). Please reduce the length of the messages or completion.",
         4900, 4096),  # vLLM before 0.12, OpenAI
        ("This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097 input "
         "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
         "prompt. (parameter=input_tokens, value=4097)", 4097, 4096),  # vLLM 0.32, as it answered here
        ("The input (4900 tokens) is longer than the model's context length (4096 tokens).", 4900, 4096),  # SGLang
        ("Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total "
         "of 5000 tokens: 4900 tokens from the input messages and 100 tokens for the completion.", 4900, 4096),
        ("request (4900 tokens) exceeds the available context size (4096 tokens)", 4900, 4096),  # llama.cpp
        ("Requested tokens (4900) exceed context window of 4096", 4900, 4096),  # llama-cpp-python
        ("This model's maximum context length is exceeded.", None, None),
    ],
)  # fmt: skip
def test_the_counts_a_refusal_states_are_read(message: str, prompt: int | None, window: int | None) -> None:
    assert Overflow.stated_in(f"model runtime answered 400: {message}") == Overflow(prompt, window)


def test_after_a_refusal_the_turns_holding_the_stated_excess_go() -> None:
    long = "word " * 100
    request = body(user(long), assistant("A"), user("short"), assistant("B"), user("now"), max_tokens=10)
    refused = "maximum context length is 150 tokens. However, you requested 215 tokens (205 in the messages"
    shorter = after_refusal(request, refused, context_window=8192)
    assert shorter is not None and shorter["messages"] == [user("short"), assistant("B"), user("now")]
    without_counts = after_refusal(request, "context length exceeded", context_window=8192)
    assert without_counts is not None and without_counts["messages"][0] == user("short")
    assert after_refusal(body(user("now")), refused, context_window=8192) is None

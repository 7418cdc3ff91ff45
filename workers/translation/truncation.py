"""`truncation: "auto"`: a chat request whose prompt does not fit the model's context loses its
oldest whole turns until it fits with room for the answer (pure: tables of cases test it).

A turn starts at a user message; the system message (instructions) stays, and so does the last
turn, the one being answered. A turn never starts between a tool call and its output, nor at the
images that follow tool results, so no call is left without its output and no answer without
the question before it. How many turns go is estimated from the tokens the prompt has, as the
server counted them (vLLM's /tokenize, llama.cpp's probe) or as its refusal states them, and
their share of the prompt's bytes; a refusal that states no count halves what can go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

Message = dict[str, Any]

# The counts servers state when a prompt overflows: vLLM 0.12 and later ("maximum context length
# is 4096 tokens. However, your prompt contains at least 4097 input tokens": a lower bound, as it
# stops counting there; too few turns dropped are dropped again on the next refusal), earlier vLLM
# and OpenAI ("maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in
# the messages, 100 in the completion)"),
# SGLang ("maximum context length of 4096 tokens … 4900 tokens from the input messages", or "The
# input (4900 tokens) is longer than the model's context length (4096 tokens)"), llama.cpp
# ("request (4900 tokens) exceeds the available context size (4096 tokens)"), llama-cpp-python
# ("Requested tokens (4900) exceed context window of 4096").
_CONTEXT = re.compile(
    r"maximum context length (?:is|of) (\d+)|context (?:length|size) \((\d+) tokens\)"
    r"|context (?:window|length|size) (?:is|of) (\d+)",
    re.I,
)
_PROMPT = re.compile(
    r"prompt contains at least (\d+) input tokens|\((\d+) in the messages|(\d+) tokens from the input"
    r"|input \((\d+) tokens\)|request \((\d+) tokens\)|requested tokens \((\d+)\)",
    re.I,
)


@dataclass(frozen=True, slots=True)
class Overflow:
    """What a refusal said: the prompt's tokens and the model's context, where it said them."""

    prompt_tokens: int | None
    context_window: int | None

    @classmethod
    def stated_in(cls, message: str) -> Overflow:
        return cls(_first_number(_PROMPT, message), _first_number(_CONTEXT, message))


def _first_number(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return None if found is None else int(next(group for group in found.groups() if group is not None))


@dataclass(frozen=True, slots=True)
class Turns:
    """A chat request's messages as its system message and its turns, the oldest first."""

    head: list[Message]
    turns: list[list[Message]]

    @classmethod
    def of(cls, messages: list[Message]) -> Turns:
        head = messages[:1] if messages and messages[0]["role"] == "system" else []
        turns: list[list[Message]] = []
        unanswered: set[str] = set()
        previous = None
        for message in messages[len(head) :]:
            starts = message["role"] == "user" and previous != "tool" and not unanswered
            if starts or not turns:
                turns.append([])
            turns[-1].append(message)
            unanswered |= {call["id"] for call in message.get("tool_calls") or []}
            if message["role"] == "tool":
                unanswered.discard(message.get("tool_call_id", ""))
            previous = message["role"]
        return cls(head, turns)

    @property
    def droppable(self) -> int:
        """How many of its turns may go: all but the last."""
        return max(0, len(self.turns) - 1)

    def without(self, count: int) -> list[Message]:
        """The messages without the `count` oldest turns."""
        return self.head + [m for turn in self.turns[count:] for m in turn]


def _size(messages: list[Message]) -> int:
    return len(orjson.dumps(messages))


def shortened(body: dict[str, Any], excess_tokens: int, prompt_tokens: int) -> dict[str, Any] | None:
    """The request without the fewest oldest turns that should hold `excess_tokens` of its
    `prompt_tokens` (at least one turn); None when only the last turn is left."""
    turns = Turns.of(body["messages"])
    if not turns.droppable:
        return None
    bytes_per_token = _size(body["messages"]) / max(1, prompt_tokens)
    excess_bytes, count = excess_tokens * bytes_per_token, 0
    while count < turns.droppable and (count == 0 or excess_bytes > 0):
        excess_bytes -= _size(turns.turns[count])
        count += 1
    return {**body, "messages": turns.without(count)}


def halved(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request without the oldest turns holding half the bytes of those that may go (at least
    one turn): for a refusal that states no count. None when only the last turn is left."""
    turns = Turns.of(body["messages"])
    if not turns.droppable:
        return None
    half = sum(_size(turn) for turn in turns.turns[: turns.droppable]) / 2
    count = 0
    while count < turns.droppable and (count == 0 or half > 0):
        half -= _size(turns.turns[count])
        count += 1
    return {**body, "messages": turns.without(count)}


def after_refusal(body: dict[str, Any], message: str, context_window: int) -> dict[str, Any] | None:
    """The request to send after the server refused `body` as longer than its context; None when
    nothing more can go. The answer keeps its room (`max_tokens`) where the server says its window."""
    overflow = Overflow.stated_in(message)
    if overflow.prompt_tokens is None:
        return halved(body)
    window = overflow.context_window or context_window
    excess = overflow.prompt_tokens + int(body["max_tokens"]) - window
    return shortened(body, max(1, excess), overflow.prompt_tokens)

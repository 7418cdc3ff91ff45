"""Compaction: a context folded into a summary the model wrote of it (pure but for the seal).

A `compaction` item stands for everything before it but the user's own words: the model is sent
the user (and system, developer) messages before the last compaction item as they were, then
the summary that item seals, as a user message, then whatever came after it. Tool calls, their
outputs, answers and reasoning before it reach the model only through the summary, which the
model itself wrote when asked with COMPACTION_PROMPT.

An automatic compaction (`context_management`) leaves the turn being answered out of its
summary: the last user message and everything after it (a pending tool call and its output)
stay as they are, after the summary, so the model goes on with the turn rather than starting it
again. Its item comes after them in the chain (it is the response's first output), so it seals,
with its summary, how many of the items just before it it left as they are.
"""

from __future__ import annotations

from typing import Any

from app.protocol.input_items import user_message
from app.protocol.sealing import Seal, SealError
from app.protocol.shapes import Item
from workers.runtime_failure import RuntimeFailure

COMPACTION_PROMPT = """\
Write a summary of the conversation so far, for yourself to continue it from later without it.
It replaces everything above except the user's own messages, which stay as they are: keep what
they do not say and you will need. Keep the goals, the decisions taken and why, constraints,
facts learned (from tools too: their results that matter, exact values, names, paths, ids,
errors), the work done, and what is still to do. Leave out pleasantries, repetition and what no
longer matters. If an earlier summary is above, carry forward what still matters in it. Write
the summary only, as dense notes."""

SUMMARY_PREFIX = "What came before in this conversation, summarized:"


def model_view(context: list[Item], seal: Seal | None) -> list[Item]:
    """The context as the model is sent it: before its last compaction item, only the messages
    of the user, system and developer; that item as its summary, followed by the items it left
    as they were. A new list: the one given may be shared."""
    last = next((i for i in range(len(context) - 1, -1, -1) if context[i]["type"] == "compaction"), None)
    if last is None:
        return context
    summary, left = _opened(context[last], seal)
    folded, untouched = context[: last - left], context[last - left : last]
    return [*own_words(folded), user_message(f"{SUMMARY_PREFIX}\n\n{summary}"), *untouched, *context[last + 1 :]]


def own_words(items: list[Item]) -> list[Item]:
    """What a summary never replaces: the user's, system and developer messages, as they were."""
    return [item for item in items if item["type"] == "message" and item["role"] != "assistant"]


def turn_start(context: list[Item]) -> int:
    """Where the turn being answered begins: at the last user message (the whole context is
    that turn when it has none)."""
    users = [i for i, item in enumerate(context) if item["type"] == "message" and item["role"] == "user"]
    return users[-1] if users else 0


def sealed_summary(seal: Seal, summary: str, left: int) -> str:
    """A compaction item's `encrypted_content`: its summary, and how many items before it it
    left out of the summary (0 for POST /v1/responses/compact, which folds them all)."""
    plain = not left and not summary.startswith(_LEFT_MARK)  # (one that starts so is marked, to be read whole)
    return seal.seal(summary if plain else f"{_LEFT_MARK}{left}\n{summary}")


_LEFT_MARK = "\x1eleft="


def summary_request(context: list[Item], seal: Seal | None) -> list[Item]:
    """What the model is asked to summarize: the context as it sees it, then the prompt."""
    return [*model_view(context, seal), user_message(COMPACTION_PROMPT)]


def summary_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A response's settings as its summary is asked with: no tools, plain text, and the model's
    own limit for its length (the client's max_output_tokens is for the answer)."""
    requested = {**settings.get("requested", {}), "max_output_tokens": None, "logprobs": False}
    text = {**settings["text"], "format": {"type": "text"}}
    return {**settings, "tools": [], "tool_choice": "auto", "text": text, "requested": requested}


def asked(settings: dict[str, Any]) -> bool:
    """Whether the response asked for its context to be compacted once it passes a threshold."""
    return any(entry["type"] == "compaction" for entry in settings.get("context_management") or [])


def threshold(settings: dict[str, Any], context_window: int, max_tokens: int) -> int | None:
    """The tokens past which a response's context is compacted before it is answered
    (`context_management`); by default, where its answer would no longer have its room."""
    for entry in settings.get("context_management") or []:
        if entry["type"] == "compaction":
            limit: int = entry.get("compact_threshold") or max(1, context_window - max_tokens)
            return limit
    return None


def _opened(item: Item, seal: Seal | None) -> tuple[str, int]:
    """A compaction item's summary, and how many items before it it left as they were."""
    if seal is None:
        raise RuntimeFailure("a compaction item's summary cannot be opened: this server has no encryption key")
    try:
        text = seal.open(item["encrypted_content"])
    except SealError:
        raise RuntimeFailure(
            "a compaction item's summary cannot be opened: the key that sealed it is no longer configured"
        ) from None
    if not text.startswith(_LEFT_MARK):
        return text, 0
    left, _, summary = text[len(_LEFT_MARK) :].partition("\n")
    return summary, int(left)

"""How long a prompt is, as the model server counts it (chat template included): to refuse
input that cannot fit the context (never truncate it), to keep max_tokens inside what the
context has left, and to report usage where the server streams none.

- vLLM: its /tokenize endpoint takes the chat messages and counts them without generating.
- llama.cpp: a one-token request for the same messages; the server's prompt cache keeps the
  evaluated prompt, so a generation before or after it does not evaluate the prompt twice.

Most prompts are far from the context's end, and that can be known without asking: a token
covers at least one byte, so the request's JSON size bounds its text's tokens. Only prompts that
might not fit (or hold images, which weigh more than their URL) are measured before generating.
"""

from __future__ import annotations

import json
from typing import Any

from app.catalog import ModelEntry
from workers.runtime_failure import CONTEXT_LENGTH_EXCEEDED, RuntimeFailure
from workers.runtimes.http_client import HttpClient, RequestTimeouts, refusal_of


async def measure(
    http: HttpClient,
    model: ModelEntry,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout: RequestTimeouts,
) -> int | None:
    """The prompt's tokens, or None for a server with no way to count them."""
    root = (model.base_url or "").rstrip("/")
    if model.prompt_measure == "tokenize":
        url, probe = f"{root.removesuffix('/v1')}/tokenize", tokenize_request(body)
    elif model.prompt_measure == "probe":
        url, probe = f"{root}/chat/completions", {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
    else:
        return None
    async with http.post_json(url, probe, headers, timeout) as answer:
        if answer.status >= 400:
            raise await refusal_of(answer)
        answered = await answer.read()
    try:
        counted = json.loads(answered)
        tokens: int = counted["count"] if model.prompt_measure == "tokenize" else counted["usage"]["prompt_tokens"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeFailure(f"model runtime sent no token count: {answered[:200]!r}", retryable=True) from exc
    return tokens


# What a chat template renders besides the messages: the tools' schemas above all (a template
# that lists them in the system prompt counts every one), its switches, and how the prompt ends.
_RENDERED = ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message")


def tokenize_request(body: dict[str, Any]) -> dict[str, Any]:
    """The /tokenize request that counts a chat request's prompt as the server renders it."""
    return {"model": body["model"], "messages": body["messages"]} | {k: body[k] for k in _RENDERED if k in body}


# Tokens a chat template adds around the messages (role markers, a default system prompt).
TEMPLATE_ALLOWANCE = 256


def surely_fits(body: dict[str, Any], context_window: int) -> bool:
    """Whether prompt + max_tokens fit the context whatever the tokenizer, by the byte bound."""
    if any(
        part.get("type") == "image_url"
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for part in m["content"]
    ):
        return False
    size = len(json.dumps(body["messages"]).encode()) + len(json.dumps(body.get("tools") or []).encode())
    return size + TEMPLATE_ALLOWANCE + int(body["max_tokens"]) <= context_window


def fit_to_context(body: dict[str, Any], prompt_tokens: int, context_window: int) -> dict[str, Any]:
    """The request with max_tokens cut to what the context has left; a prompt that leaves no room
    is refused."""
    room = context_window - prompt_tokens
    if room <= 0:
        raise RuntimeFailure(
            f"The input is {prompt_tokens} tokens; the model's context window is {context_window} tokens.",
            code=CONTEXT_LENGTH_EXCEEDED,
        )
    return {**body, "max_tokens": min(body["max_tokens"], room)}

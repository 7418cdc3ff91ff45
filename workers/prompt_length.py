"""How long a prompt is, as the model server counts it (chat template included), measured
before generating: to refuse input that cannot fit the context (never truncate it), to keep
max_tokens inside what the context has left, and to report usage where the server streams none.

- vLLM: its /tokenize endpoint takes the chat messages and counts them without generating.
- llama.cpp: a one-token request for the same messages; the server's prompt cache keeps the
  evaluated prompt, so the generation that follows starts from it.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from app.catalog import ModelEntry
from workers.runtime_errors import CONTEXT_LENGTH_EXCEEDED, RuntimeFailure, refusal


async def measure(
    http: aiohttp.ClientSession,
    model: ModelEntry,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
) -> int | None:
    """The prompt's tokens, or None for a server with no way to count them."""
    root = (model.base_url or "").rstrip("/")
    if model.prompt_measure == "tokenize":
        url, probe = f"{root.removesuffix('/v1')}/tokenize", {"model": body["model"], "messages": body["messages"]}
    elif model.prompt_measure == "probe":
        url, probe = f"{root}/chat/completions", {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
    else:
        return None
    async with http.post(url, json=probe, headers=headers, timeout=timeout) as answer:
        if answer.status >= 400:
            raise refusal(answer.status, (await answer.read()).decode(errors="replace")[:500])
        counted = await answer.json()
    tokens: int = counted["count"] if model.prompt_measure == "tokenize" else counted["usage"]["prompt_tokens"]
    return tokens


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

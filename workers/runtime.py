"""The client side of the runtime contract: OpenAI Chat Completions, streaming, over HTTP.

Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama) speaks it. Closing the stream
is how a generation is aborted: the server frees the sequence when the connection goes.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.catalog import ModelEntry


class RuntimeFailure(Exception):
    """The runtime refused, broke off or could not be reached; the message says which."""


class ChatRuntimeClient:
    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def stream(self, model: ModelEntry, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yields the runtime's chunks as dicts; raises RuntimeFailure on any failure."""
        url = f"{(model.base_url or '').rstrip('/')}/chat/completions"
        headers = {}
        if model.api_key_env and os.environ.get(model.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[model.api_key_env]}"
        try:
            async with self._http.stream("POST", url, json=body, headers=headers) as response:
                if response.status_code >= 400:
                    detail = (await response.aread()).decode(errors="replace")[:500]
                    raise RuntimeFailure(f"model runtime answered {response.status_code}: {detail}")
                async for line in response.aiter_lines():
                    chunk = _parse_line(line)
                    if chunk == "done":
                        return
                    if isinstance(chunk, dict):
                        yield chunk
        except httpx.HTTPError as exc:
            raise RuntimeFailure(f"model runtime unreachable or broke off: {exc!r}") from exc


def _parse_line(line: str) -> dict[str, Any] | str | None:
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return "done"
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError as exc:
        raise RuntimeFailure(f"model runtime sent invalid JSON: {data[:200]!r}") from exc
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise RuntimeFailure(f"model runtime error: {message}")
    if not isinstance(chunk, dict):
        raise RuntimeFailure(f"model runtime sent a non-object chunk: {data[:200]!r}")
    return chunk

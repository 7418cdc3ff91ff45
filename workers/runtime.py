"""The client side of the runtime contract: OpenAI Chat Completions, streaming, over HTTP.

Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama) speaks it. Closing the stream
is how a generation is aborted: the server frees the sequence when the connection goes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson

from app.catalog import ModelEntry
from workers import prompt_length
from workers.http_client import HttpClient, HttpError, RequestTimeouts
from workers.runtime_errors import RuntimeFailure, refusal_of
from workers.translate import chunk_carries_output

log = logging.getLogger(__name__)


RETRY_BACKOFF_SECONDS = 0.25  # then doubled per attempt


class ChatRuntimeClient:
    """One connection pool per worker (see workers/http_client.py for why it is our own)."""

    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._http = HttpClient()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _timeout(self, model: ModelEntry) -> RequestTimeouts:
        return RequestTimeouts(
            connect=model.connect_timeout_seconds or self._connect_timeout,
            read=model.read_timeout_seconds or self._read_timeout,
        )

    async def stream(self, model: ModelEntry, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yields the runtime's chunks as dicts; raises RuntimeFailure on any failure. A failure
        before the first token is retried (model.max_retries); after it, it ends the generation.
        Leaving the iteration early (a stop) closes the connection, which aborts the generation
        upstream. For a server that streams no usage, a usage chunk with the prompt's tokens comes last."""
        url = f"{(model.base_url or '').rstrip('/')}/chat/completions"
        headers = {}
        if model.api_key_env and os.environ.get(model.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[model.api_key_env]}"
        timeout = self._timeout(model)
        for attempt in range(model.max_retries + 1):
            produced = False
            try:
                async for chunk in self._attempt(model, url, body, headers, timeout):
                    produced = produced or chunk_carries_output(chunk)
                    yield chunk
                return
            except RuntimeFailure as failure:
                if produced or not failure.retryable or attempt == model.max_retries:
                    raise
                log.warning("model %s: %s; retrying (%d of %d)", model.id, failure, attempt + 1, model.max_retries)
            await asyncio.sleep(RETRY_BACKOFF_SECONDS * 2**attempt)

    async def _attempt(
        self, model: ModelEntry, url: str, body: dict[str, Any], headers: dict[str, str], timeout: RequestTimeouts
    ) -> AsyncIterator[dict[str, Any]]:
        try:
            prompt_tokens = None
            if model.prompt_measure != "none" and not prompt_length.surely_fits(body, model.context_window):
                prompt_tokens = await prompt_length.measure(self._http, model, body, headers, timeout)
                if prompt_tokens is not None:
                    body = prompt_length.fit_to_context(body, prompt_tokens, model.context_window)
            async with self._http.post_json(url, body, headers, timeout) as response:
                if response.status >= 400:
                    raise await refusal_of(response)
                finished = False
                async for line in _lines(response.pieces()):
                    chunk = _parse_line(line)
                    if chunk == "done":
                        break
                    if isinstance(chunk, dict):
                        finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                        yield chunk
            if not model.streams_usage:
                if prompt_tokens is None:  # measured now, the prompt is in the server's cache
                    prompt_tokens = await prompt_length.measure(self._http, model, body, headers, timeout)
                yield {"choices": [], "usage": {"prompt_tokens": prompt_tokens or 0}}
            if not finished:
                raise RuntimeFailure("model runtime ended its stream without a finish_reason", retryable=True)
        except (TimeoutError, OSError, HttpError) as exc:
            raise RuntimeFailure(f"model runtime unreachable or broke off: {exc!r}", retryable=True) from exc


async def _lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Lines of any length, undecoded: the JSON parser takes UTF-8 bytes as they are."""
    buffer = b""
    async for data in pieces:
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line
    if buffer:
        yield buffer


def _parse_line(line: bytes) -> dict[str, Any] | str | None:
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return "done"
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RuntimeFailure(f"model runtime sent invalid JSON: {_excerpt(data)}") from exc
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise RuntimeFailure(f"model runtime error: {message}")
    if not isinstance(chunk, dict):
        raise RuntimeFailure(f"model runtime sent a non-object chunk: {_excerpt(data)}")
    return chunk


def _excerpt(data: bytes) -> str:
    return repr(data[:200].decode(errors="replace"))

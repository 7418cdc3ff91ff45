"""The client side of the runtime contract: OpenAI Chat Completions, streaming, over HTTP.

Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama) speaks it. Closing the stream
is how a generation is aborted: the server frees the sequence when the connection goes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from app.catalog import ModelEntry

log = logging.getLogger(__name__)


class RuntimeFailure(Exception):
    """The runtime refused, broke off or could not be reached; the message says which."""

    def __init__(self, message: str, retryable: bool = False, code: str = "server_error") -> None:
        super().__init__(message)
        # Whether asking again may succeed: the server was unreachable, busy or broke off, as
        # opposed to refusing this request.
        self.retryable = retryable
        # The error code the failed response carries: context_length_exceeded when the input
        # cannot fit the model's context, else server_error.
        self.code = code


CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
# How servers word it when they do not say it with a code (vLLM, TGI, Ollama, llama.cpp).
_CONTEXT_WORDING = re.compile(
    r"context_length_exceeded|maximum context length|context window|context length|exceeds? .*context", re.I
)


def refusal(status: int, detail: str) -> RuntimeFailure:
    """The failure for an HTTP error answer of a model server."""
    code = CONTEXT_LENGTH_EXCEEDED if status == 400 and _CONTEXT_WORDING.search(detail) else "server_error"
    return RuntimeFailure(
        f"model runtime answered {status}: {detail}", retryable=status >= 500 or status == 429, code=code
    )


RETRY_BACKOFF_SECONDS = 0.25  # then doubled per attempt


class ChatRuntimeClient:
    """One connection pool per worker. aiohttp rather than httpx here: reading a token stream is
    the worker's hottest loop, and aiohttp's C parser costs about half the CPU per chunk."""

    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    def _timeout(self, model: ModelEntry) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None,
            connect=model.connect_timeout_seconds or self._connect_timeout,
            sock_read=model.read_timeout_seconds or self._read_timeout,
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
        for attempt in range(model.max_retries + 1):
            produced = False
            try:
                async for chunk in self._attempt(model, url, body, headers):
                    produced = produced or _carries_output(chunk)
                    yield chunk
                return
            except RuntimeFailure as failure:
                if produced or not failure.retryable or attempt == model.max_retries:
                    raise
                log.warning("model %s: %s; retrying (%d of %d)", model.id, failure, attempt + 1, model.max_retries)
            await asyncio.sleep(RETRY_BACKOFF_SECONDS * 2**attempt)

    async def _attempt(
        self, model: ModelEntry, url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> AsyncIterator[dict[str, Any]]:
        try:
            if model.counts_prompt_first:
                body = await self._fit_to_context(model, body, headers)
            async with self._client().post(url, json=body, headers=headers, timeout=self._timeout(model)) as response:
                if response.status >= 400:
                    raise refusal(response.status, (await response.read()).decode(errors="replace")[:500])
                finished = False
                async for line in _lines(response.content):
                    chunk = _parse_line(line)
                    if chunk == "done":
                        break
                    if isinstance(chunk, dict):
                        finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                        yield chunk
            if not model.streams_usage:  # its refusal also tells why a stream came back empty
                usage = {"prompt_tokens": await self._prompt_tokens(model, url, body, headers)}
                yield {"choices": [], "usage": usage}
            if not finished:
                raise RuntimeFailure("model runtime ended its stream without a finish_reason", retryable=True)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RuntimeFailure(f"model runtime unreachable or broke off: {exc!r}", retryable=True) from exc

    async def _fit_to_context(self, model: ModelEntry, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """The request with max_tokens cut to what the context has left after the prompt (as the
        server counts it, chat template included); a prompt that leaves no room is refused."""
        root = (model.base_url or "").rstrip("/").removesuffix("/v1")
        probe = {"model": body["model"], "messages": body["messages"]}
        async with self._client().post(
            f"{root}/tokenize", json=probe, headers=headers, timeout=self._timeout(model)
        ) as answer:
            if answer.status >= 400:
                raise refusal(answer.status, (await answer.read()).decode(errors="replace")[:500])
            count: int = (await answer.json())["count"]
        room = model.context_window - count
        if room <= 0:
            raise RuntimeFailure(
                f"The input is {count} tokens; the model's context window is {model.context_window} tokens.",
                code=CONTEXT_LENGTH_EXCEEDED,
            )
        return {**body, "max_tokens": min(body["max_tokens"], room)}

    async def _prompt_tokens(self, model: ModelEntry, url: str, body: dict[str, Any], headers: dict[str, str]) -> int:
        """The prompt's length in tokens, as the server counts it after its chat template: a
        one-token request for the same messages, which the server's prompt cache makes cheap."""
        probe = {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
        async with self._client().post(url, json=probe, headers=headers, timeout=self._timeout(model)) as response:
            if response.status >= 400:
                raise refusal(response.status, (await response.read()).decode(errors="replace")[:500])
            answer = await response.json()
        prompt_tokens: int = answer["usage"]["prompt_tokens"]
        return prompt_tokens


def _carries_output(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
            return True
    return False


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[str]:
    """Lines of any length (aiohttp's own line reader refuses lines over 64 KiB)."""
    buffer = b""
    async for data in content.iter_any():
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode()
    if buffer:
        yield buffer.decode()


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

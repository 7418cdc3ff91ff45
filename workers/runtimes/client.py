"""The client side of the runtime contract: OpenAI Chat Completions, streaming, over HTTP.

Any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama) speaks it. Closing the stream
is how a generation is aborted: the server frees the sequence when the connection goes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson

from app.catalog import ModelEntry
from workers.runtime_failure import CONTEXT_LENGTH_EXCEEDED, RuntimeFailure
from workers.runtimes import prompt_length
from workers.runtimes.http_client import HttpClient, HttpError, RequestTimeouts, refusal_of
from workers.translation import truncation
from workers.translation.translate import chunk_carries_output

log = logging.getLogger(__name__)


RETRY_BACKOFF_SECONDS = 0.25  # then doubled per attempt
# `truncation: "auto"`: how many times a prompt is cut and measured again, or cut and sent again
# after the server refused it as too long; each cut is estimated from the counts so far.
MAX_TRUNCATING_MEASURES = 4
MAX_TRUNCATING_REFUSALS = 4

ChunkConsumer = Callable[[dict[str, Any]], None]


class ChatRuntimeClient:
    """One connection pool per worker (workers/runtimes/http_client.py)."""

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

    async def count_prompt(self, model: ModelEntry, body: dict[str, Any], *, truncate: bool = False) -> int | None:
        """The prompt's tokens as the server counts them (with `truncate`, once it lost the turns
        it would lose to fit); None for a server that cannot count."""
        headers, timeout = _headers(model), self._timeout(model)
        tokens = await prompt_length.measure(self._http, model, body, headers, timeout)
        if tokens is not None and truncate:
            _, tokens = await self._truncated(model, body, tokens, headers, timeout)
        return tokens

    async def stream(
        self, model: ModelEntry, body: dict[str, Any], on_chunk: ChunkConsumer, *, truncate: bool = False
    ) -> None:
        """Hands the runtime's chunks, as dicts, to `on_chunk` as they arrive (`on_chunk` must not
        block: the stream is read in between); raises RuntimeFailure on any failure. A failure
        before the first token is retried (model.max_retries); after it, it ends the generation.
        Cancelling the call closes the connection, which aborts the generation upstream. For a
        server that streams no usage, a usage chunk with the prompt's tokens comes last. With
        `truncate`, a prompt longer than the context loses its oldest turns until it fits
        (workers/translation/truncation.py): measured first where the server can count it, else
        sent again shorter after the server refuses it, a bounded number of times."""
        url = f"{(model.base_url or '').rstrip('/')}/chat/completions"
        headers = _headers(model)
        timeout = self._timeout(model)
        attempt = refusals = 0
        while True:
            produced = False

            def note(chunk: dict[str, Any]) -> None:
                nonlocal produced
                produced = produced or chunk_carries_output(chunk)
                on_chunk(chunk)

            try:
                await self._attempt(model, url, body, headers, timeout, note, truncate)
                return
            except RuntimeFailure as failure:
                if produced:
                    raise
                if truncate and failure.code == CONTEXT_LENGTH_EXCEEDED and refusals < MAX_TRUNCATING_REFUSALS:
                    shorter = truncation.after_refusal(body, str(failure), model.context_window)
                    if shorter is not None:
                        refusals += 1
                        log.info("model %s: prompt refused as too long; sending it without its oldest turns", model.id)
                        body = shorter
                        continue
                if not failure.retryable or attempt == model.max_retries:
                    raise
                attempt += 1
                log.warning("model %s: %s; retrying (%d of %d)", model.id, failure, attempt, model.max_retries)
            await asyncio.sleep(RETRY_BACKOFF_SECONDS * 2 ** (attempt - 1))

    async def _attempt(
        self,
        model: ModelEntry,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: RequestTimeouts,
        on_chunk: ChunkConsumer,
        truncate: bool,
    ) -> None:
        try:
            prompt_tokens = None
            if model.prompt_measure != "none" and not prompt_length.surely_fits(body, model.context_window):
                prompt_tokens = await prompt_length.measure(self._http, model, body, headers, timeout)
                if prompt_tokens is not None:
                    if truncate:
                        body, prompt_tokens = await self._truncated(model, body, prompt_tokens, headers, timeout)
                    body = prompt_length.fit_to_context(body, prompt_tokens, model.context_window)
            async with self._http.post_json(url, body, headers, timeout) as response:
                if response.status >= 400:
                    raise await refusal_of(response)
                reader = EventStreamReader(on_chunk)
                await response.deliver(reader.feed)
                reader.close()
            if not model.streams_usage:
                if prompt_tokens is None:  # measured now, the prompt is in the server's cache
                    prompt_tokens = await prompt_length.measure(self._http, model, body, headers, timeout)
                on_chunk({"choices": [], "usage": {"prompt_tokens": prompt_tokens or 0}})
            if not reader.finished:
                raise RuntimeFailure("model runtime ended its stream without a finish_reason", retryable=True)
        except (TimeoutError, OSError, HttpError) as exc:
            raise RuntimeFailure(f"model runtime unreachable or broke off: {exc!r}", retryable=True) from exc

    async def _truncated(
        self,
        model: ModelEntry,
        body: dict[str, Any],
        prompt_tokens: int,
        headers: dict[str, str],
        timeout: RequestTimeouts,
    ) -> tuple[dict[str, Any], int]:
        """The request without the oldest turns it must lose to fit with room for the answer, and
        its prompt's tokens, measured again after each cut (at most MAX_TRUNCATING_MEASURES)."""
        for _ in range(MAX_TRUNCATING_MEASURES):
            excess = prompt_tokens + int(body["max_tokens"]) - model.context_window
            shorter = truncation.shortened(body, excess, prompt_tokens) if excess > 0 else None
            if shorter is None:
                break
            body = shorter
            measured = await prompt_length.measure(self._http, model, body, headers, timeout)
            prompt_tokens = prompt_tokens if measured is None else measured
        return body, prompt_tokens


class EventStreamReader:
    """Splits a server-sent event stream into lines of any length, undecoded (the JSON parser
    takes UTF-8 bytes as they are), and hands on its chunks until `[DONE]`."""

    def __init__(self, on_chunk: ChunkConsumer) -> None:
        self._on_chunk = on_chunk
        self._rest = b""
        self.done = False  # [DONE] came
        self.finished = False  # a chunk gave a finish_reason

    def feed(self, data: bytes) -> bool:
        """Takes a piece of the stream; True after [DONE], and nothing more from then on."""
        if self.done:
            return True
        *lines, self._rest = (self._rest + data).split(b"\n")
        return any(self._read_line(line) for line in lines)

    def close(self) -> None:
        """The stream ended: its last line may lack a newline."""
        if self._rest and not self.done:
            self._read_line(self._rest)

    def _read_line(self, line: bytes) -> bool:
        chunk = _parse_line(line)
        if chunk == "done":
            self.done = True
        elif isinstance(chunk, dict):
            # Read as the contract shapes it; checking every chunk's shape first would cost the
            # token path more than a broken server is worth.
            try:
                self.finished = self.finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                self._on_chunk(chunk)
            except (AttributeError, TypeError) as exc:
                log.warning("a chunk of an unexpected shape: %s", _excerpt(line), exc_info=True)
                raise RuntimeFailure(f"model runtime sent a chunk of an unexpected shape: {_excerpt(line)}") from exc
        return self.done


def _headers(model: ModelEntry) -> dict[str, str]:
    if model.api_key_env and os.environ.get(model.api_key_env):
        return {"Authorization": f"Bearer {os.environ[model.api_key_env]}"}
    return {}


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
    if b"\\u0000" in data:  # (JSON carries NUL only escaped)
        chunk = _without_nul(chunk)
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise RuntimeFailure(f"model runtime error: {message}")
    if not isinstance(chunk, dict):
        raise RuntimeFailure(f"model runtime sent a non-object chunk: {_excerpt(data)}")
    return chunk


def _without_nul(value: Any) -> Any:
    """Postgres text cannot hold NUL: a model's NUL becomes U+FFFD before any event is made of
    it, so what streams and what is stored agree (and one odd token cannot stop a commit)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value


def _excerpt(data: bytes) -> str:
    return repr(data[:200].decode(errors="replace"))

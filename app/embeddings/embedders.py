"""Embedding a list of texts with a catalog embedding model, in whichever process asks (the API
for a search's query and `POST /v1/embeddings`, a worker for a file's chunks). A model a worker
hosts (runtime vllm) is reached over HTTP by that worker, and by every other process through
the worker: a job on the model's queue answered on a Redis key (app/queue/replies.py).

A text longer than the model reads whole (`max_input_tokens`) is embedded as the normalised mean
of the vectors of its windows, so that no part of a chunk goes unseen; the embedded model's
work runs in threads (onnxruntime leaves the GIL), one batch at a time per process, so that
embedding shares the CPU with the process's other work rather than taking it.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from app.catalog import EmbeddedEmbeddingModel, EmbeddingModel, OpenAIEmbeddingModel, VllmEmbeddingModel, model_queue
from app.protocol.ids import new_id
from app.queue import replies
from app.queue.jobs import QueueRedis
from app.queue.redis_keys import EMBED_JOB
from app.queue.redis_link import REDIS_DOWN

if TYPE_CHECKING:
    from app.embeddings.minilm import MiniLM  # (loaded on first use: onnxruntime is heavy)

# A hosted server is this worker's own: as long as a batch takes on a busy GPU, not a network's wait.
HOSTED_TIMEOUT_SECONDS = 120.0


class EmbeddingFailed(Exception):
    """The embedding model could not embed the texts (its server unreachable, or refusing)."""


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: list[list[float]]
    tokens: int  # the texts' tokens, as the model counts them (or as its server reports)


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> Embedded: ...

    async def close(self) -> None: ...


_WORDS = re.compile(r"\S+\s*")


def windows(text: str, size: int) -> list[str]:
    """The text in consecutive pieces of about `size` tokens of a word-piece tokenizer (counted
    as words: a piece of English text has about 1.3 word pieces a word)."""
    words = _WORDS.findall(text)
    per_window = max(1, int(size / 1.4))
    return ["".join(words[i : i + per_window]) for i in range(0, len(words), per_window)] or [text]


async def in_windows(
    texts: list[str], size: int, batch_size: int, embed_batch: Callable[[list[str]], Awaitable[Embedded]]
) -> Embedded:
    """The texts embedded batch by batch, each longer one as the mean of its windows' vectors."""
    pieces = [windows(text, size) for text in texts]
    flat = [piece for text_pieces in pieces for piece in text_pieces]
    vectors: list[list[float]] = []
    tokens = 0
    for start in range(0, len(flat), batch_size):
        embedded = await embed_batch(flat[start : start + batch_size])
        vectors += embedded.vectors
        tokens += embedded.tokens
    out, at = [], 0
    for text_pieces in pieces:
        part = vectors[at : at + len(text_pieces)]
        out.append(part[0] if len(part) == 1 else mean_of(part))
        at += len(text_pieces)
    return Embedded(out, tokens)


def mean_of(vectors: list[list[float]]) -> list[float]:
    summed = [sum(values) for values in zip(*vectors, strict=True)]
    norm = math.sqrt(sum(x * x for x in summed)) or 1.0
    return [x / norm for x in summed]


class MiniLMEmbedder:
    """The embedded model, loaded on first use (about a second, 100 MB)."""

    def __init__(self, entry: EmbeddedEmbeddingModel) -> None:
        self.entry = entry
        self._model: object | None = None
        self._load_lock = asyncio.Lock()
        self._running = asyncio.Semaphore(1)

    async def embed(self, texts: list[str]) -> Embedded:
        from app.embeddings.minilm import MiniLM

        if self._model is None:
            async with self._load_lock:
                if self._model is None:
                    self._model = await asyncio.to_thread(MiniLM, self.entry.threads)
        model = self._model
        assert isinstance(model, MiniLM)
        return await in_windows(texts, self.entry.max_input_tokens, self.entry.batch_size, partial(self._batch, model))

    async def _batch(self, model: MiniLM, batch: list[str]) -> Embedded:
        async with self._running:
            vectors = await asyncio.to_thread(model.embed, batch)
            tokens = sum(await asyncio.to_thread(model.count_tokens, batch))
        return Embedded(vectors, tokens)

    async def close(self) -> None:
        pass


class HttpEmbedder:
    """An OpenAI-compatible `/v1/embeddings` server: an external one, or the one this worker hosts."""

    def __init__(
        self,
        entry: EmbeddingModel,
        base_url: str,
        served_name: str,
        timeout: float,
        api_key: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """`extra`: fields of each request beside OpenAI's (a known server's own)."""
        self.entry = entry
        self._served_name = served_name
        self._extra = extra or {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            headers={"authorization": f"Bearer {api_key}"} if api_key else {},
            trust_env=False,
        )

    async def embed(self, texts: list[str]) -> Embedded:
        return await in_windows(texts, self.entry.max_input_tokens, self.entry.batch_size, self._batch)

    async def _batch(self, batch: list[str]) -> Embedded:
        try:
            answer = await self._client.post(
                "/embeddings",
                json={"model": self._served_name, "input": batch, "encoding_format": "float", **self._extra},
            )
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(f"the embedding server could not be reached ({type(exc).__name__})") from None
        if answer.status_code != 200:
            raise EmbeddingFailed(f"the embedding server answered HTTP {answer.status_code}: {answer.text[:300]}")
        body = answer.json()
        data = sorted(body["data"], key=lambda d: d["index"])
        if len(data) != len(batch) or any(len(d["embedding"]) != self.entry.dimensions for d in data):
            raise EmbeddingFailed(
                f"the embedding server's vectors are not {len(batch)} of {self.entry.dimensions} dimensions"
            )
        return Embedded([d["embedding"] for d in data], int((body.get("usage") or {}).get("prompt_tokens") or 0))

    async def close(self) -> None:
        await self._client.aclose()


class WorkerEmbedder:
    """A model hosted by a worker, from any other process: each call an `embed_texts` job on the
    model's queue, its answer pushed to a Redis key this process waits on."""

    def __init__(self, entry: VllmEmbeddingModel, queue: QueueRedis, base_queue: str, timeout: float) -> None:
        self.entry = entry
        self._queue = queue
        self._queue_name = model_queue(base_queue, entry.id)
        self._timeout = timeout

    async def embed(self, texts: list[str]) -> Embedded:
        try:
            answer = await replies.ask(
                self._queue, self._queue_name, EMBED_JOB, new_id("req"), (self.entry.id, texts), self._timeout
            )
        except REDIS_DOWN:
            raise EmbeddingFailed("the job queue (Redis) is unavailable") from None
        if answer is None:
            raise EmbeddingFailed(f"no worker of the embedding model '{self.entry.id}' answered in time")
        if "error" in answer:
            raise EmbeddingFailed(str(answer["error"]))
        return Embedded(answer["vectors"], int(answer["tokens"]))

    async def close(self) -> None:
        pass


@dataclass
class Embedders:
    """One embedder per catalog embedding model, made when first asked for. `queue` and
    `base_queue` reach the workers that host a model; `timeout` is how long one waits for them."""

    queue: QueueRedis | None = None
    base_queue: str = ""
    timeout: float = 60.0
    made: dict[str, Embedder] = field(default_factory=dict)

    def of(self, entry: EmbeddingModel) -> Embedder:
        if entry.id not in self.made:
            self.made[entry.id] = self._made(entry)
        return self.made[entry.id]

    def _made(self, entry: EmbeddingModel) -> Embedder:
        if isinstance(entry, EmbeddedEmbeddingModel):
            return MiniLMEmbedder(entry)
        if isinstance(entry, OpenAIEmbeddingModel):
            key = os.environ.get(entry.api_key_env) if entry.api_key_env else None
            return HttpEmbedder(entry, entry.base_url, entry.served_name, entry.timeout_seconds, key)
        assert isinstance(entry, VllmEmbeddingModel)
        if entry.base_url is not None:  # this worker hosts it
            # vLLM cuts a text past its context rather than refusing it (a word of many pieces
            # can take a window past `max_input_tokens`).
            truncating = {"truncate_prompt_tokens": -1}
            return HttpEmbedder(entry, entry.base_url, entry.id, HOSTED_TIMEOUT_SECONDS, extra=truncating)
        if self.queue is None:
            raise EmbeddingFailed(f"the embedding model '{entry.id}' is reached through its worker; no queue here")
        return WorkerEmbedder(entry, self.queue, self.base_queue, self.timeout)

    async def close(self) -> None:
        for embedder in self.made.values():
            await embedder.close()

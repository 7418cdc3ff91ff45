"""Documents over real vLLM: embeddings from vLLM's pooling runner (hosted by a worker of its
own, reached by every other process through it), a vector store ingested with it, and a
file_search turn whose search results reach the generating engine."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import openai

from app.catalog import EmbeddedEmbeddingModel
from app.embeddings.embedders import MiniLMEmbedder
from tests.conftest import wait_until
from tests.vllm.conftest import EMBEDDER, EXTERNAL, VllmStack

HANDBOOK = (
    "Vacation policy. Every employee of Lisbon Widgets receives thirty-one days of paid vacation per "
    "year. Unused days carry over until March.\n\nGarage. Your badge opens level two of the garage."
)


def _embeddings_ready(vllm: VllmStack) -> None:
    """Once the worker hosting the pooling runner has started it (the tier's engines start together)."""

    def answered() -> bool:
        worker = vllm.embedding_worker
        assert worker.poll() is None, f"its worker exited:\n{vllm.embedding_worker_log.read_text()[-3000:]}"
        try:
            vllm.client.embeddings.create(model=EMBEDDER, input="ready?")
        except openai.APIStatusError:  # a 503 while its engine starts
            return False
        return True

    wait_until(answered, timeout=240)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_vllms_pooling_runner_embeds_as_the_embedded_model_does(vllm: VllmStack) -> None:
    _embeddings_ready(vllm)
    texts = ["Your badge opens level two of the garage.", "thirty-one days of paid vacation"]
    embedded = vllm.client.embeddings.create(model=EMBEDDER, input=texts)
    vectors = [item.embedding for item in embedded.data]
    assert [len(v) for v in vectors] == [384, 384] and embedded.usage.prompt_tokens > 0
    # The same model (all-MiniLM-L6-v2) run in this process from its int8 ONNX export.
    local = asyncio.run(MiniLMEmbedder(EmbeddedEmbeddingModel(id="m", runtime="embedded")).embed(texts)).vectors
    assert min(_cosine(a, b) for a, b in zip(vectors, local, strict=True)) > 0.99
    assert _cosine(vectors[0], vectors[1]) < 0.9  # different texts, different vectors


def test_a_file_search_turn_over_real_vllm_finds_the_passage_and_the_engine_reads_it(vllm: VllmStack) -> None:
    _embeddings_ready(vllm)
    store: Any = vllm.client.post(
        "/vector_stores", body={"name": "handbook", "embedding_model": EMBEDDER}, cast_to=dict[str, Any]
    )
    attached = vllm.client.vector_stores.files.upload_and_poll(
        vector_store_id=store["id"], file=("handbook.txt", HANDBOOK.encode()), poll_interval_ms=300
    )
    assert attached.status == "completed", attached.last_error
    found = vllm.client.vector_stores.search(store["id"], query="how many vacation days do employees get")
    assert found.data and "thirty-one days" in found.data[0].content[0].text

    answer = vllm.client.responses.create(
        model=EXTERNAL,
        input="How many days of paid vacation do employees of Lisbon Widgets get?",
        tools=[{"type": "file_search", "vector_store_ids": [store["id"]]}],
        tool_choice={"type": "file_search"},
        include=["file_search_call.results"],
        max_output_tokens=60,
    )
    assert answer.status in ("completed", "incomplete"), answer.error
    [call] = [item for item in answer.output if item.type == "file_search_call"]
    assert call.status == "completed" and call.queries and all(q.strip() for q in call.queries)
    assert call.results and call.results[0].filename == "handbook.txt"
    assert answer.output[-1].type == "message"
    # The engine was asked with the search function (held to its schema) and then read the results.
    first, then = vllm.proxied()[-2:]
    [function] = [t["function"] for t in first["tools"] if t["function"]["name"] == "file_search"]
    assert function["strict"] is True
    tool_messages = [m for m in then["messages"] if m["role"] == "tool"]
    assert tool_messages and "thirty-one days" in json.dumps(tool_messages)

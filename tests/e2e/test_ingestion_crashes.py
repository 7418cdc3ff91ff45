"""Ingestion survives its worker: a worker killed while it embeds a file's chunks leaves them
committed batch by batch, and another worker takes the file up from there once the claim lapses,
writing each chunk once; the file ends `completed` and searchable. A file detached while it is
being ingested leaves no chunk."""

from __future__ import annotations

import signal
import time
from typing import Any

from app.documents.chunking import Chunker
from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack

WORDS = " ".join(("slow-embedding" if n % 10 == 0 else f"w{n}") for n in range(4000))
_CHUNKER = Chunker(100, 0)
CHUNKS = len([*_CHUNKER.add(WORDS), *_CHUNKER.finish()])  # as the worker cuts them


def _chunks(environment: Environment, file_id: str) -> list[int]:
    return [row[0] for row in environment.query("SELECT seq FROM chunks WHERE file_id = $1 ORDER BY seq", file_id)]


def _status(environment: Environment, file_id: str) -> tuple[str, int]:
    [row] = environment.query("SELECT status, attempts FROM vector_store_files WHERE file_id = $1", file_id)
    return row["status"], row["attempts"]


def _slow_store(stack: Stack) -> tuple[str, str]:
    store: Any = stack.client.post(
        "/vector_stores",
        body={
            "embedding_model": "remote-embedder",
            "chunking_strategy": {
                "type": "static",
                "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0},
            },
        },
        cast_to=dict[str, Any],
    )
    uploaded = stack.client.files.create(file=("long.txt", WORDS.encode()), purpose="assistants")
    stack.client.vector_stores.files.create(vector_store_id=store["id"], file_id=uploaded.id)
    return store["id"], uploaded.id


def test_a_worker_killed_mid_ingestion_is_followed_by_another_and_no_chunk_is_written_twice(
    vector_environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(vector_environment) as stack:
        first = stack.start_worker()
        store_id, file_id = _slow_store(stack)
        wait_until(lambda: len(_chunks(vector_environment, file_id)) >= 32, timeout=30)  # a batch or more stored
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        stored = len(_chunks(vector_environment, file_id))
        assert stored < CHUNKS and _status(vector_environment, file_id) == ("in_progress", 1)
        stack.start_worker()
        wait_until(lambda: _status(vector_environment, file_id)[0] != "in_progress", timeout=60)
        assert _status(vector_environment, file_id) == ("completed", 2)
        assert _chunks(vector_environment, file_id) == list(range(CHUNKS))  # each once, the first worker's kept
        found = stack.client.vector_stores.search(store_id, query="w3999")
        assert any("w3999" in hit.content[0].text for hit in found.data)  # the second worker's last chunk
        store = stack.client.vector_stores.retrieve(store_id)
        assert (store.file_counts.completed, store.file_counts.in_progress) == (1, 0)


def test_a_file_detached_while_it_is_ingested_leaves_no_chunk(
    vector_environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(vector_environment) as stack:
        stack.start_worker()
        store_id, file_id = _slow_store(stack)
        wait_until(lambda: len(_chunks(vector_environment, file_id)) > 0, timeout=30)
        stack.client.vector_stores.files.delete(file_id, vector_store_id=store_id)
        assert _chunks(vector_environment, file_id) == []
        # The ingestion stops at its next batch (half a second later here), and writes nothing more.
        asked = fake.stats().get("embedding_requests", 0)
        time.sleep(2)
        assert fake.stats().get("embedding_requests", 0) <= asked + 1
        assert _chunks(vector_environment, file_id) == []
        assert stack.client.vector_stores.retrieve(store_id).file_counts.total == 0

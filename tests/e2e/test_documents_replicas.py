"""Documents with two API replicas: a file's bytes and a store live in Postgres, so whatever one
replica took, the other serves (its content streamed back whole, its store searched, its delete
seen at once), with a worker ingesting for both."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, free_port, start_api
from tests.e2e.processes import Stack

# Past one piece (1 MiB), with the fact the search finds at its end.
BIG = ("filler words " * 200_000 + "\n\nThe garage code is 4711.").encode()


def test_what_one_replica_took_the_other_serves(vector_environment: Environment, fake: FakeRuntime) -> None:
    with Stack(vector_environment) as stack:
        stack.start_worker()
        port = free_port()
        stack.processes.append(start_api(vector_environment, port, **stack.env))
        one = stack.client
        other = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=one.api_key, max_retries=0, timeout=60)

        uploaded = one.files.create(file=("big.txt", BIG), purpose="assistants")
        assert other.files.retrieve(uploaded.id).bytes == len(BIG)
        content = other.files.content(uploaded.id).content
        assert hashlib.sha256(content).digest() == hashlib.sha256(BIG).digest()

        store = other.vector_stores.create(
            name="replicas", file_ids=[uploaded.id], extra_body={"embedding_model": "remote-embedder"}
        )
        attached = one.vector_stores.files.poll(uploaded.id, vector_store_id=store.id, poll_interval_ms=200)
        assert attached.status == "completed", attached.last_error
        found = other.vector_stores.search(store.id, query="garage code")
        # (Found among the results, not ranked: the fake runtime's embeddings are arbitrary, so the
        # fact's chunk may tie with a filler chunk; ranking is tested with real embedders elsewhere.)
        assert any("4711" in part.text for hit in found.data for part in hit.content)

        search = {"name": "file_search", "arguments": json.dumps({"queries": ["garage code"]})}
        script = "#fake " + json.dumps({"tool_calls": [search], "then": {"text": "4711"}})
        answer = one.responses.create(
            model="fake",
            input=script,
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}],
            include=["file_search_call.results"],
        )
        stored = other.responses.retrieve(answer.id, include=["file_search_call.results"])
        [call] = [item for item in stored.output if item.type == "file_search_call"]
        assert call.results and any("4711" in (result.text or "") for result in call.results)

        one.files.delete(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            other.files.retrieve(uploaded.id)
        assert other.vector_stores.files.list(store.id).data == []  # detached from its store too
        left: Any = vector_environment.query("SELECT count(*) AS n FROM chunks WHERE file_id = $1", uploaded.id)
        assert left[0]["n"] == 0

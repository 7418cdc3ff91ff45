"""An embedding model a worker hosts (runtime vllm: `worker --model hosted-embedder` starts vLLM's
pooling runner, here tests/stand_in_vllm.py serving the fake runtime's /v1/embeddings). Only that
worker reaches its server: the API's embeddings and searches, and other workers' file searches,
ask it through its queue, and its files are ingested there. tests/vllm runs it over real vLLM."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack, stand_in_vllm
from tests.fake_runtime import fake_embedding

SEARCH = "#fake " + json.dumps(
    {
        "tool_calls": [{"name": "file_search", "arguments": json.dumps({"queries": ["garage badge"]})}],
        "then": {"chunks": ["Level two."]},
    }
)


def _launches(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_hosted_embedding_model_embeds_ingests_and_searches_through_its_worker(
    vector_environment: Environment, fake: FakeRuntime, tmp_path: Path
) -> None:
    launches = tmp_path / "launches.jsonl"
    with Stack(vector_environment, RESPONSES_EMBED_TIMEOUT="2") as stack:
        # No worker hosts it yet: a call that needs it fails in bounded time, naming it.
        with pytest.raises(openai.InternalServerError) as refused:
            stack.client.embeddings.create(model="hosted-embedder", input="hello")
        assert refused.value.status_code == 503 and "hosted-embedder" in refused.value.message

        hosting = stack.start_worker(
            "--model",
            "hosted-embedder",
            PATH=f"{stand_in_vllm(tmp_path)}:{os.environ['PATH']}",
            STAND_IN_VLLM_LOG=str(launches),
        )
        wait_until(lambda: bool(_launches(launches)), timeout=30)
        [launch] = _launches(launches)
        assert launch["runner"] == "pooling" and launch["model"] == "org/embedder"
        assert launch["served_model_name"] == "hosted-embedder"

        # The API's embeddings come from the hosted server, through the worker.
        embedded = _wait_for_embeddings(stack)
        assert embedded.data[0].embedding == pytest.approx(fake_embedding("the garage badge"), abs=1e-6)

        # With no other worker running, a file of a store of this model is ingested by that worker.
        store: Any = stack.client.post(
            "/vector_stores", body={"name": "hosted", "embedding_model": "hosted-embedder"}, cast_to=dict[str, Any]
        )
        text = b"Your garage badge opens level two. The printer is on the third floor."
        uploaded = stack.client.files.create(file=("garage.txt", text), purpose="assistants")
        attached = stack.client.vector_stores.files.create_and_poll(
            file_id=uploaded.id, vector_store_id=store["id"], poll_interval_ms=200
        )
        assert attached.status == "completed", attached.last_error
        found = stack.client.vector_stores.search(store["id"], query="garage badge")
        assert [hit.filename for hit in found.data] == ["garage.txt"]

        # A generation worker's file_search embeds its query through the hosting worker too.
        stack.start_worker()
        answer = stack.client.responses.create(
            model="fake",
            input=SEARCH,
            tools=[{"type": "file_search", "vector_store_ids": [store["id"]]}],
            include=["file_search_call.results"],
        )
        [call] = [item for item in answer.output if item.type == "file_search_call"]
        assert call.status == "completed" and call.results and call.results[0].filename == "garage.txt"

        # Its worker killed, its callers fail again within the wait, and nothing hangs.
        server_pid = int(_launches(launches)[-1]["pid"])
        hosting.send_signal(signal.SIGKILL)
        hosting.wait(10)
        os.kill(server_pid, signal.SIGKILL)
        with pytest.raises(openai.InternalServerError) as gone:
            stack.client.vector_stores.search(store["id"], query="garage badge")
        assert gone.value.status_code == 503


def _wait_for_embeddings(stack: Stack) -> Any:
    """The first embeddings answer once the hosted server is up (the worker takes jobs only then)."""
    answers: list[Any] = []

    def answered() -> bool:
        try:
            answers.append(stack.client.embeddings.create(model="hosted-embedder", input="the garage badge"))
        except openai.APIStatusError:  # a 503 while the server starts
            return False
        return True

    wait_until(answered, timeout=30)
    return answers[-1]

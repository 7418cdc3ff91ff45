"""A file search survives its worker (design invariant 4), as MCP calls do: a worker killed or
shut down while its search embeds the query, with a second worker alive, is continued by the
other. A search only reads, so the one in flight is run again; the `file_search_call` is stored
once, and the stream has every event once. A steer during a search lets it end, as during an MCP
call."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack
from tests.e2e.test_continuation import Follower, running_worker, two_workers
from tests.e2e.test_steering import _ends, _frames_until, _until_ends

HANDBOOK = b"Your garage badge opens level two. The printer is on the third floor."


@pytest.fixture
def environment(vector_database_of_its_own: Environment) -> Environment:
    """(Its workers are killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return vector_database_of_its_own


class SearchFollower(Follower):
    """A background stream of a response that searches the store once, followed to its end."""

    def __init__(self, stack: Stack, store_id: str, query: str, then: dict[str, Any] | None = None) -> None:
        self.tools = [{"type": "file_search", "vector_store_ids": [store_id]}]
        search = {"name": "file_search", "arguments": json.dumps({"queries": [query]})}
        script = {"tool_calls": [search], "then": then or {"chunks": ["Level two", "【1】", "."]}}
        super().__init__(stack.client, "continuing-model", "#fake " + json.dumps(script))

    def _follow(self, client: Any, model: str, script: str) -> None:
        stream = client.responses.create(
            model=model,
            input=script,
            tools=self.tools,
            include=["file_search_call.results"],
            background=True,
            stream=True,
        )
        for event in stream:
            self.events.append(event)
            self.created.set()


def _store(stack: Stack) -> str:
    store: Any = stack.client.post(
        "/vector_stores", body={"name": "handbook", "embedding_model": "remote-embedder"}, cast_to=dict[str, Any]
    )
    attached = stack.client.vector_stores.files.upload_and_poll(
        vector_store_id=store["id"], file=("garage.txt", HANDBOOK), poll_interval_ms=200
    )
    assert attached.status == "completed", attached.last_error
    return str(store["id"])


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_search_in_flight_is_run_again_by_the_other_worker_and_stored_once(
    environment: Environment, fake: FakeRuntime, how: signal.Signals
) -> None:
    with Stack(environment, RESPONSES_SHUTDOWN_GRACE_SECONDS="30") as stack:
        workers = two_workers(stack, environment)
        store_id = _store(stack)
        embedded_before = fake.stats().get("embedding_requests", 0)
        follower = SearchFollower(stack, store_id, "stalled-embedding garage badge")
        # The search has begun: its item is out, and its query is with the embedding server.
        wait_until(lambda: any(e.type == "response.file_search_call.searching" for e in follower.events))
        wait_until(lambda: fake.stats().get("embedding_requests", 0) > embedded_before)
        running_worker(environment, follower.response_id, workers).send_signal(how)
        follower.join()

        numbers = [event.sequence_number for event in follower.events]
        assert numbers == list(range(len(numbers)))  # no gap, no duplicate, across the handover
        final = follower.events[-1]
        assert final.type == "response.completed"
        [call] = [item for item in final.response.output if item.type == "file_search_call"]
        assert call.status == "completed" and call.results and call.results[0].filename == "garage.txt"
        added = [e for e in follower.events if e.type == "response.output_item.added"]
        assert [e.item.type for e in added].count("file_search_call") == 1
        assert fake.stats()["embedding_requests"] - embedded_before == 2  # in flight, then again
        assert final.response.output_text == "Level two."
        [message] = [item for item in final.response.output if item.type == "message"]
        [citation] = message.content[0].annotations
        assert citation.type == "file_citation" and citation.filename == "garage.txt"
        stored = environment.query(
            "SELECT count(*) AS n FROM items WHERE response_id = $1 AND type = 'file_search_call'",
            follower.response_id,
        )
        assert stored[0]["n"] == 1


def test_killed_after_its_search_the_answer_goes_on_from_the_kept_results(
    environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(environment) as stack:
        workers = two_workers(stack, environment)
        store_id = _store(stack)
        fake.reset()
        embedded_before = fake.stats().get("embedding_requests", 0)
        words = " ".join(f"w{i}" for i in range(60))
        follower = SearchFollower(stack, store_id, "garage badge", then={"text": words, "delay": 0.05})
        wait_until(lambda: follower.deltas() >= 10)
        running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
        follower.join()

        numbers = [event.sequence_number for event in follower.events]
        assert numbers == list(range(len(numbers))) and follower.events[-1].type == "response.completed"
        assert follower.text == words == follower.events[-1].response.output_text
        assert fake.stats()["embedding_requests"] - embedded_before == 1  # the search was not made again
        continued = fake.requests()[-1]["messages"]
        assert continued[-1]["role"] == "assistant"  # the answer so far, continued
        told = continued[-2]
        assert told["role"] == "tool" and "garage badge opens level two" in told["content"]
        assert "【1】" in told["content"]  # with its marker: what it cites still names the file


def test_a_steer_during_a_search_lets_the_search_end_and_asks_the_model_no_more(
    environment: Environment, fake: FakeRuntime
) -> None:
    with Stack(environment) as stack:
        stack.start_worker()
        store_id = _store(stack)
        search = {"name": "file_search", "arguments": json.dumps({"queries": ["stalled-embedding garage badge"]})}
        script = "#fake " + json.dumps({"tool_calls": [search], "then": {"text": "more"}})
        tool = {"type": "file_search", "vector_store_ids": [store_id]}
        fake.reset()
        url = f"ws://127.0.0.1:{stack.port}/v1/responses"
        with connect(url, additional_headers={"Authorization": f"Bearer {stack.client.api_key}"}) as socket:
            socket.send(json.dumps({"type": "response.create", "model": "fake", "input": script, "tools": [tool]}))
            first = _frames_until(socket, lambda f: f["type"] == "response.file_search_call.searching")
            target = first[0]["response"]["id"]
            socket.send(json.dumps({"type": "response.steer", "previous_response_id": target, "input": "Enough."}))
            steered, successor = _ends(_until_ends(socket, 2, first))
        assert steered["incomplete_details"] == {"reason": "steered"}
        [(kind, status)] = [(i["type"], i.get("status")) for i in steered["output"]]
        assert (kind, status) == ("file_search_call", "completed")  # the search ended; no answer was asked for
        assert successor["previous_response_id"] == target
        assert successor["output"][-1]["content"][0]["text"] == "Echo: Enough."
        assert len(fake.requests()) == 2  # the steered response's one round, then its successor's
        # The successor's context holds the search and its results, as a chain's would.
        told = fake.requests()[-1]["messages"]
        assert any(m["role"] == "tool" and "garage badge opens level two" in m["content"] for m in told)

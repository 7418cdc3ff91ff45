"""A web search and its worker (design invariant 4), with a second worker alive: a worker killed
while its search waits on the backend leaves a call whose query the log does not hold (OpenAI's
opening events carry no action), so the other worker ends it failed and tells the model, which
goes on; a worker killed after its search leaves the results kept in the item, and the answer
goes on from them without asking the backend again. Either way the `web_search_call` is stored
once and the stream has every event once."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack
from tests.e2e.test_continuation import Follower, running_worker, two_workers
from tests.searxng_stand_in import SearxngStandIn


@pytest.fixture
def environment(database_of_its_own: Environment) -> Environment:
    """(Its workers are killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return database_of_its_own


class WebSearchFollower(Follower):
    """A background stream of a response that searches the web once, followed to its end."""

    def __init__(self, stack: Stack, query: str, then: dict[str, Any]) -> None:
        search = {"name": "web_search", "arguments": json.dumps({"query": query})}
        super().__init__(
            stack.client, "continuing-model", "#fake " + json.dumps({"tool_calls": [search], "then": then})
        )

    def _follow(self, client: Any, model: str, script: str) -> None:
        stream = client.responses.create(
            model=model, input=script, tools=[{"type": "web_search"}], background=True, stream=True
        )
        for event in stream:
            self.events.append(event)
            self.created.set()


def _stored_calls(environment: Environment, response_id: str) -> int:
    rows = environment.query(
        "SELECT count(*) AS n FROM items WHERE response_id = $1 AND type = 'web_search_call'", response_id
    )
    return int(rows[0]["n"])


def test_a_search_in_flight_at_a_killed_worker_ends_failed_and_the_model_goes_on(
    environment: Environment, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    with Stack(environment, RESPONSES_WEB_SEARCH_URL=searxng.url, RESPONSES_WEB_SEARCH_TIMEOUT_SECONDS="30") as stack:
        workers = two_workers(stack, environment)
        fake.reset()
        asked = len(searxng.queries)
        follower = WebSearchFollower(stack, "slow news", then={"text": "I could not search."})
        wait_until(lambda: any(e.type == "response.web_search_call.searching" for e in follower.events))
        wait_until(lambda: searxng.queries[asked:] == ["slow news"])  # the backend has it
        running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
        follower.join()

        numbers = [event.sequence_number for event in follower.events]
        assert numbers == list(range(len(numbers)))  # no gap, no duplicate, across the handover
        final = follower.events[-1]
        assert final.type == "response.completed" and final.response.output_text == "I could not search."
        [call] = [item for item in final.response.output if item.type == "web_search_call"]
        assert call.status == "failed"
        assert searxng.queries[asked:] == ["slow news"]  # not asked again
        told = fake.requests()[-1]["messages"][-1]
        assert told["role"] == "tool" and "interrupted" in told["content"]
        assert _stored_calls(environment, follower.response_id) == 1


def test_killed_after_its_search_the_answer_goes_on_from_the_kept_results(
    environment: Environment, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    with Stack(environment, RESPONSES_WEB_SEARCH_URL=searxng.url) as stack:
        workers = two_workers(stack, environment)
        fake.reset()
        asked = len(searxng.queries)
        words = " ".join(f"w{i}" for i in range(60))
        follower = WebSearchFollower(stack, "tea", then={"text": words, "delay": 0.05})
        wait_until(lambda: follower.deltas() >= 10)
        running_worker(environment, follower.response_id, workers).send_signal(signal.SIGKILL)
        follower.join()

        numbers = [event.sequence_number for event in follower.events]
        assert numbers == list(range(len(numbers))) and follower.events[-1].type == "response.completed"
        final = follower.events[-1].response
        assert final.output_text == words == follower.text
        assert searxng.queries[asked:] == ["tea"]  # the search was not made again
        continued = fake.requests()[-1]["messages"]
        assert continued[-1]["role"] == "assistant"  # the answer so far, continued
        told = continued[-2]  # the kept results, with the markers the first worker gave them
        assert told["role"] == "tool" and '<result marker="【1】" title="tea — docs.python.org"' in told["content"]
        assert _stored_calls(environment, follower.response_id) == 1

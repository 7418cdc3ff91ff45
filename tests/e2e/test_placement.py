"""Cache-aware placement (app/queue/placement.py) with real processes: two workers on one queue,
and the turns that continue a context (a chain, a conversation, a `prompt_cache_key`) all run on
the worker that ran the context before, where its engine's prefix cache holds it. Without
placement each turn goes to whichever worker hears it first, so a run of turns on one worker
would be chance (1 in 2 per turn)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.conftest import Environment
from tests.e2e.processes import Stack
from tests.e2e.test_continuation import running_worker, two_workers

TURNS = 5


@pytest.fixture
def environment(database_of_its_own: Environment) -> Environment:
    """(A worker is killed: tests/e2e/conftest.py `database_of_its_own` says why.)"""
    return database_of_its_own


def worker_of(environment: Environment, response_id: str, workers: list[subprocess.Popen[bytes]]) -> int:
    return int(running_worker(environment, response_id, workers).pid)


def test_each_turn_of_a_chain_a_conversation_and_a_cache_key_runs_where_the_one_before_ran(
    environment: Environment,
) -> None:
    with Stack(environment) as stack:
        workers = two_workers(stack, environment)
        client = stack.client
        for chain in range(3):
            previous, ran_on = None, []
            for turn in range(TURNS):
                response = client.responses.create(
                    model="fake", input=f"chain {chain} turn {turn}", previous_response_id=previous
                )
                ran_on.append(worker_of(environment, response.id, workers))
                previous = response.id
            assert len(set(ran_on)) == 1, ran_on

        conversation = client.conversations.create().id
        turns = [
            client.responses.create(model="fake", input=f"turn {n}", conversation=conversation) for n in range(TURNS)
        ]
        assert len({worker_of(environment, r.id, workers) for r in turns}) == 1

        # Unrelated requests sharing a cache key.
        keyed = [client.responses.create(model="fake", input=f"task {n}", prompt_cache_key="k") for n in range(TURNS)]
        assert len({worker_of(environment, r.id, workers) for r in keyed}) == 1


def test_a_turn_whose_worker_died_runs_on_another_and_the_next_turn_sticks_there(
    environment: Environment,
) -> None:
    """The dead worker's heartbeat is still fresh: the turn placed on it waits the placement wait,
    then runs once, elsewhere; the next turn is placed where it ran."""
    with Stack(environment) as stack:
        workers = two_workers(stack, environment)
        client = stack.client
        first = client.responses.create(model="fake", input="turn 0")
        dead = running_worker(environment, first.id, workers)
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        [alive] = [w for w in workers if w is not dead]
        second = client.responses.create(model="fake", input="turn 1", previous_response_id=first.id)
        assert second.status == "completed"
        assert worker_of(environment, second.id, workers) == alive.pid
        third = client.responses.create(model="fake", input="turn 2", previous_response_id=second.id)
        assert worker_of(environment, third.id, workers) == alive.pid

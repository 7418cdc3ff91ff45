"""A Postgres primary failover under load: two real servers (the standby made by pg_basebackup,
streaming, synchronous), DATABASE_URL naming both with target_session_attrs=read-write. The
primary is killed mid-answer and the standby promoted; every response, streamed in the
foreground or run in the background, ends completed with its exact text, and every stream's
events are contiguous: nothing a client saw was lost, nothing was run twice."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from app.storage.migrate import migrate
from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.processes import Stack, Streams
from tests.private_postgres import Cluster, replicated_pair

FOREGROUND, BACKGROUND = 20, 10


@pytest.fixture
def failover_pair(environment: Environment) -> Iterator[tuple[Environment, Cluster, Cluster]]:
    """The test's environment on a synchronous primary and standby, as libpq's list of servers."""
    with replicated_pair(synchronous=True) as (primary, standby):
        primary.create_database("responses")
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        url = f"postgresql://postgres@{hosts}/responses?target_session_attrs=read-write"
        own = Environment(url, environment.redis_url, environment.queue_name, environment.models_path)
        migrate(own.settings())
        yield own, primary, standby


def _script(n: int) -> tuple[str, str]:
    text = " ".join(f"r{n}w{i}" for i in range(40))
    return text, "#fake " + json.dumps({"text": text, "delay": 0.15})


@pytest.mark.parametrize("answers_lost", [False, True])
def test_a_primary_failover_loses_and_fails_nothing(
    fake: FakeRuntime, failover_pair: tuple[Environment, Cluster, Cluster], answers_lost: bool
) -> None:
    """`answers_lost`: the standby's WAL receiver is paused before the crash and goes on after
    it, so the commits in flight reach the standby but their answers never reach the workers
    (who try them again: nothing may be stored twice)."""
    own, primary, standby = failover_pair
    texts = [_script(n)[0] for n in range(FOREGROUND + BACKGROUND)]
    requests = [
        {"model": "fake", "input": _script(n)[1], "background": n >= FOREGROUND} for n in range(FOREGROUND + BACKGROUND)
    ]
    # Leases as a deployment's: a worker alive through the failover keeps its generations.
    with Stack(own, RESPONSES_LEASE_SECONDS="30") as stack:
        stack.start_worker()
        streams = Streams(stack.client, requests)
        wait_until(lambda: all(len(events) > 5 for events in streams.received), timeout=30)
        receiver = int(standby.value("SELECT pid FROM pg_stat_wal_receiver"))
        if answers_lost:
            os.kill(receiver, signal.SIGSTOP)
            time.sleep(0.5)
        primary.kill()
        if answers_lost:
            os.kill(receiver, signal.SIGCONT)
        time.sleep(1)  # (the time a failover manager takes to decide, shortened)
        standby.promote()
        streams.wait(timeout=90)
        streams.assert_whole(texts)
        background = [streams.received[n][0].response.id for n in range(FOREGROUND, FOREGROUND + BACKGROUND)]
        for response_id, text in zip(background, texts[FOREGROUND:], strict=True):
            assert stack.client.responses.retrieve(response_id).output_text == text
        assert len(fake.requests()) == FOREGROUND + BACKGROUND  # none run twice, none continued
        assert stack.client.responses.create(model="fake", input="after").status == "completed"

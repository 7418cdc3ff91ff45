"""A Postgres outage is a pause, not a fault: live streams stay open (kept alive) while the event
log cannot be read, and go on from where they were once it can; generations go on meanwhile,
their commits waiting. Past RESPONSES_POSTGRES_OUTAGE_SECONDS a stream ends with an `error` event.
Each test runs on a Postgres cluster of its own, stopped and started again."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, wait_until
from tests.e2e.conftest import Restart
from tests.e2e.processes import Stack, Streams

STREAMS = 50


def _script(stream: int, words: int, delay: float) -> tuple[str, str]:
    text = " ".join(f"s{stream}w{i}" for i in range(words))
    return text, "#fake " + json.dumps({"text": text, "delay": delay})


@pytest.mark.parametrize("outage_seconds", [5, 30])
def test_foreground_streams_ride_out_a_postgres_outage_whole(
    fake: FakeRuntime, private_postgres: tuple[Environment, Restart], tmp_path: Path, outage_seconds: int
) -> None:
    own, restart = private_postgres
    api_log = tmp_path / "api.log"
    # Leases outlast the outage, as a deployment's would (its default is 30 s): a worker that is
    # alive keeps its generations.
    with Stack(own, api_log=api_log, RESPONSES_LEASE_SECONDS=str(outage_seconds + 30)) as stack:
        stack.start_worker()
        texts, scripts = zip(*(_script(n, words=40, delay=0.2) for n in range(STREAMS)), strict=True)
        streams = Streams(stack.client, [{"model": "fake", "input": script} for script in scripts])
        wait_until(lambda: all(len(events) > 5 for events in streams.received), timeout=30)

        def while_down() -> None:
            down_at = time.monotonic()
            # A create meanwhile is refused at once (the SDK would retry it), leaving nothing behind.
            with pytest.raises(openai.InternalServerError) as refused:
                stack.client.responses.create(model="fake", input="during the outage")
            assert refused.value.status_code == 503
            time.sleep(max(0.0, outage_seconds - (time.monotonic() - down_at)))

        restart(while_down)
        streams.wait(timeout=90)
        streams.assert_whole(list(texts))
        assert own.query("SELECT count(*) FROM responses")[0][0] == STREAMS
    # Each loop that met the outage told it once, with its traceback, not every second of it.
    told = _traceback_headlines(api_log.read_text())
    assert told and len(set(told)) == len(told), told


def _traceback_headlines(log: str) -> list[str]:
    """The message of each log record that carries a traceback, without its time."""
    headlines: list[str] = []
    record, told = "", False
    for line in log.splitlines():
        if re.match(r"\d{4}-\d\d-\d\d \d\d:", line):
            record, told = line.split(" ", 2)[2], False
        elif line.startswith("Traceback") and not told:
            headlines.append(record)
            told = True
    return headlines


def test_a_stream_ends_with_an_error_event_when_postgres_stays_away_past_its_patience(
    fake: FakeRuntime, private_postgres: tuple[Environment, Restart]
) -> None:
    own, restart = private_postgres
    stack = Stack(own, RESPONSES_LEASE_SECONDS="60", RESPONSES_POSTGRES_OUTAGE_SECONDS="4")
    outage = threading.Thread(target=restart, args=(lambda: time.sleep(15),))
    _, script = _script(0, words=60, delay=0.2)
    started = 0.0
    try:
        stack.start_worker()
        numbers: list[int] = []
        with pytest.raises(openai.APIError) as ended:
            for event in stack.client.responses.create(model="fake", input=script, stream=True):
                numbers.append(event.sequence_number)
                if len(numbers) == 5:
                    outage.start()
                    started = time.monotonic()
        assert "database has been unreachable for over 4s" in ended.value.message
        assert 4 <= time.monotonic() - started < 12
        assert numbers == list(range(len(numbers)))  # what it had was whole, in order
    finally:
        if outage.is_alive():
            outage.join()
        stack.close()

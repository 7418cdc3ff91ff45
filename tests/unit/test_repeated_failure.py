"""A failure that repeats while its cause lasts is two lines in the log: when it begins (with its
traceback) and when it ends (how often, how long), whatever the number of retries between."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.process.repeated_failure import RepeatedFailure
from app.process.side_tasks import SideTasks

log = logging.getLogger("tests.repeated_failure")


def test_an_outage_is_logged_when_it_begins_and_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    failure = RepeatedFailure("reading the log", log)
    caplog.set_level(logging.INFO, logger=log.name)
    for _ in range(30):  # thirty retries, a second apart, while the database is away
        try:
            raise ConnectionRefusedError("connection refused")
        except ConnectionRefusedError:
            failure.failed()
    failure.succeeded()
    failure.succeeded()  # (nothing more to say)
    began, ended = caplog.records
    assert began.getMessage() == "reading the log failed; retrying, and saying when it succeeds again"
    assert began.exc_info is not None and began.exc_info[0] is ConnectionRefusedError
    assert ended.getMessage().startswith("reading the log succeeds again after 30 failures over ")
    assert failure.failures == 0


async def test_a_periodic_task_failing_in_a_row_logs_twice(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0

    async def reap() -> None:
        nonlocal runs
        runs += 1
        if runs <= 5:
            raise OSError("the database is away")

    caplog.set_level(logging.INFO, logger="app.process.side_tasks")
    tasks = SideTasks()
    tasks.start_every("reaper", 0.01, reap)
    async with asyncio.timeout(5):
        while runs < 8:
            await asyncio.sleep(0.01)
    await tasks.close()
    lines = [record.getMessage() for record in caplog.records if record.name == "app.process.side_tasks"]
    assert lines[0] == "reaper (every 0.01s) failed; retrying, and saying when it succeeds again"
    assert lines[1].startswith("reaper (every 0.01s) succeeds again after 5 failures over ")
    assert len(lines) == 2

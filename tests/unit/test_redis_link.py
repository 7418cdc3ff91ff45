"""How a process tells a Redis outage: logged once when it begins and once when it ends, its
length measured, and retries paced by a backoff that grows to a cap."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError

from app.queue.redis_link import Backoff, RedisLink


def test_an_outage_is_logged_once_when_it_begins_and_once_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    link = RedisLink()
    assert link.down_for == 0.0 and link.up_for == float("inf")
    with caplog.at_level(logging.WARNING, logger="app.redis_link"):
        for what in ("queue poll", "heartbeat", "queue poll"):
            with link.tolerated(what):
                raise ConnectionError("refused")
        assert link.down_for > 0 and link.up_for == 0.0
        link.answered()
        link.answered()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "Redis is unreachable",
        "Redis is back after 0.0s",
    ]
    assert "queue poll" in caplog.records[0].getMessage()
    assert link.down_for == 0.0 and 0 <= link.up_for < 1


def test_errors_other_than_an_outage_are_not_swallowed() -> None:
    link = RedisLink()
    with pytest.raises(ValueError), link.tolerated("parsing"):
        raise ValueError("a bug, not an outage")
    assert link.down_for == 0.0


def test_backoff_doubles_up_to_its_cap_and_starts_over_when_reset() -> None:
    backoff = Backoff(first=0.1, most=1.0)
    delays = [backoff.next() for _ in range(6)]
    for delay, nominal in zip(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0], strict=True):
        assert nominal * 0.75 <= delay <= nominal * 1.25
    backoff.reset()
    assert backoff.next() <= 0.125

"""The steps of a generation's start: counted in the metrics as they end, and told in its log line, the
ones that are known and nothing made up for the others."""

from __future__ import annotations

import logging
import time

import pytest

from app.process.metrics import REGISTRY
from workers.jobs import start_times
from workers.jobs.start_times import StartTimes


def test_a_queued_job_tells_every_step_from_its_enqueueing(caplog: pytest.LogCaptureFixture) -> None:
    enqueued = time.time() - 1.0
    times = StartTimes.of_job({"enqueue_time_ms": int(enqueued * 1000), "heard_at": enqueued + 0.002})
    times.taken, times.claimed = enqueued + 0.003, enqueued + 0.0105
    times.asked, times.first_token, times.committed = enqueued + 0.011, enqueued + 0.2, enqueued + 0.203
    assert times.steps_ms() == pytest.approx(
        {"queued": 2.0, "take": 1.0, "claim": 7.5, "ask": 8.0, "first_token": 189.0, "commit": 3.0},
        abs=1.1,  # (enqueue time: whole ms)
    )
    with caplog.at_level(logging.INFO, logger="responses_server.generation"):
        start_times.ended("resp_1", "m", "incomplete", 7, times)
    [record] = caplog.records
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["status"] == "incomplete" and fields["output_tokens"] == 7
    assert fields["commit_ms"] == pytest.approx(3.0, abs=0.1)
    assert fields["duration_ms"] >= 989  # from the claim (before the runtime request), a second ago, to now
    assert record.getMessage().startswith("response resp_1 incomplete (m): 7 output tokens; queued ")


def test_a_response_asked_beside_its_claim_tells_both_from_its_take() -> None:
    """A stored response that starts afresh: its runtime request goes out before its claim returns."""
    times = StartTimes.of_job({"enqueue_time_ms": 1000, "heard_at": 1.5, "taken_at": 1.75})
    times.asked, times.first_token, times.claimed = 1.76, 1.9, 2.0
    assert times.steps_ms() == pytest.approx(
        {"queued": 500.0, "take": 250.0, "claim": 250.0, "ask": 10.0, "first_token": 140.0}
    )


def test_a_job_run_outside_the_queue_worker_or_ended_before_its_first_token_tells_only_what_happened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    times = StartTimes.of_job({})  # (a job function called directly: no queue times)
    times.claimed = time.time()
    with caplog.at_level(logging.INFO, logger="responses_server.generation"):
        start_times.ended("resp_2", "m", "failed", None, times)
    [record] = caplog.records
    fields = record.fields  # type: ignore[attr-defined]
    assert not any(name.endswith("_ms") and name != "duration_ms" for name in fields)
    assert fields["enqueued_at"] is None and fields["output_tokens"] is None
    assert record.getMessage().startswith("response resp_2 failed (m): not queued; ")
    assert record.getMessage().endswith(" ms since its start")

    caplog.clear()
    times = StartTimes.of_job({"enqueue_time_ms": 1000, "heard_at": 1.5, "taken_at": 1.75})
    times.claimed = 2.0  # claimed, then failed before any token
    with caplog.at_level(logging.INFO, logger="responses_server.generation"):
        start_times.ended("resp_3", "m", "failed", None, times)
    fields = caplog.records[0].fields  # type: ignore[attr-defined]
    assert (fields["queued_ms"], fields["take_ms"], fields["claim_ms"]) == (500.0, 250.0, 250.0)
    assert "first_token_ms" not in fields and "commit_ms" not in fields


def test_each_step_is_counted_in_the_metrics_when_it_ends() -> None:
    def count(step: str) -> float:
        return REGISTRY.get_sample_value("responses_start_step_seconds_count", {"model": "m-steps", "step": step}) or 0

    now = time.time()
    times = StartTimes.of_job({"enqueue_time_ms": int(now * 1000) - 5, "heard_at": now, "taken_at": now})
    times.claimed_now("m-steps")
    assert [count(step) for step in ("queued", "take", "claim", "ask", "first_token")] == [1, 1, 1, 0, 0]
    times.asked_now("m-steps")
    assert [count(step) for step in ("ask", "first_token")] == [1, 0]
    times.first_token_now("m-steps")
    assert [count(step) for step in ("first_token", "commit")] == [1, 0]
    times.committed_now("m-steps")
    assert count("commit") == 1
    StartTimes.of_job({}).claimed_now("m-steps")  # (no queue times: only what is known is counted)
    assert [count(step) for step in ("queued", "take", "claim")] == [1, 1, 1]

"""A worker is taken for gone (and its store=false jobs removed) only once its heartbeat has been
missing for a few housekeeping periods and a lease: not when a Redis failover lost the key and the
next beat restores it (app/housekeeping/process_state.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from app.housekeeping.process_state import ProcessState


def test_a_heartbeat_missing_for_a_moment_is_not_a_dead_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    state = SimpleNamespace(
        settings=SimpleNamespace(housekeeping_seconds=1.0, lease_seconds=2.0),  # patience: 5 s
        workers_seen=set(),
        _missing_since={},
    )

    def reap(alive: set[str], at: float) -> set[str]:
        now[0] = at
        return ProcessState._workers_gone(state, alive)  # type: ignore[arg-type]

    assert reap({"a", "b"}, 100.0) == set()
    assert reap({"a"}, 101.0) == set()  # b's heartbeat went missing
    assert reap({"a", "b"}, 103.0) == set()  # and came back: b lives
    assert reap({"a"}, 104.0) == set()
    assert reap({"a"}, 108.0) == set()  # missing for 4 s of 5
    assert reap({"a"}, 109.5) == {"b"}  # 5.5 s: gone, once
    assert reap({"a"}, 120.0) == set() and state.workers_seen == {"a"}

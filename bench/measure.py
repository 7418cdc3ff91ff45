"""What the benchmark scripts measure a process or a series of samples with (Linux /proc)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p99 of durations in seconds, in milliseconds."""
    return {"p50_ms": round(1000 * statistics.median(values), 2), "p99_ms": percentile(values, 0.99)}


def percentile(values: list[float], share: float) -> float:
    """The duration (seconds) that `share` of them do not exceed, in milliseconds; NaN for none."""
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * share))], 2) if ordered else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wakeups(pid: int) -> int:
    """How many times the process's threads have slept and been woken so far (voluntary context
    switches): on a virtual machine each costs 0.1-0.2 ms of CPU before any work is done."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("voluntary_ctxt"))
    return total


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")

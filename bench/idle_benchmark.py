"""What the system costs when nothing or little happens: CPU while idle, CPU per 1,000 tokens of
one stream, and time to first token on an idle system, for each worker poll interval asked for.

    python bench/idle_benchmark.py [--polls 0.01 1.0] [--seconds 20] [--tokens 1000] [--creates 20]

For each `RESPONSES_WORKER_POLL_DELAY` in `--polls` (run one after the other, on one machine, in
one run: the first is the baseline) it starts the stack (bench/stack.py), lets it settle, and
measures over `--seconds` the CPU of the API and worker processes, of Redis and of all Postgres
processes with nothing to do, and how often each was woken; then the CPU of the same processes
(the fake runtime excluded) while one stream of `--tokens` tokens runs (5 ms apart), per 1,000
tokens; then the time to the first token of `--creates` streamed creates, one after another.
First, what waking a process costs on this machine: the CPU a small piece of work takes back to
back, and after a 20 ms sleep.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds, percentiles, wakeups
from bench.stack import Stack, running_stack


def service_pids() -> dict[str, list[int]]:
    """Redis's and every Postgres process's pid on this machine."""
    found: dict[str, list[int]] = {"redis": [], "postgres": []}
    for status in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = status.read_text().strip()
        except OSError:
            continue
        if name.startswith("redis-server"):
            found["redis"].append(int(status.parent.name))
        elif name in ("postgres", "postmaster"):
            found["postgres"].append(int(status.parent.name))
    return found


def total_of(pids: list[int], measure: Callable[[int], float] = cpu_seconds) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += measure(pid)
        except OSError:  # a Postgres backend that ended
            pass
    return total


async def cpu_during(groups: dict[str, list[int]], work: Any) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds each group of processes used while `work` ran, and how many times it was woken."""
    before = {name: (total_of(pids), total_of(pids, wakeups)) for name, pids in groups.items()}
    await work
    cpu = {name: round(total_of(pids) - before[name][0], 3) for name, pids in groups.items()}
    woken = {name: total_of(pids, wakeups) - before[name][1] for name, pids in groups.items()}
    return cpu, woken


def wake_up_cost(samples: int = 300) -> dict[str, float]:
    """CPU microseconds of 20 JSON encodings, back to back and each after a 20 ms sleep: the
    difference is what being woken costs a process (the wake-up, cold caches) before its work."""

    def cpu_per_piece(sleep: float) -> float:
        started = time.process_time()
        for _ in range(samples):
            for n in range(20):
                json.dumps({"n": n})
            if sleep:
                time.sleep(sleep)
        return round((time.process_time() - started) / samples * 1e6, 1)

    return {"back_to_back_us": cpu_per_piece(0.0), "after_a_20ms_sleep_us": cpu_per_piece(0.02)}


async def stream_once(http: httpx.AsyncClient, stack: Stack, script: dict[str, Any]) -> float:
    """Streams one response to its end; the seconds to its first text delta."""
    body = {"model": "fake", "input": "#fake " + json.dumps(script), "stream": True}
    started, first = time.perf_counter(), 0.0
    async with http.stream("POST", f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
        async for line in answer.aiter_lines():
            if not first and line.startswith("event: response.output_text.delta"):
                first = time.perf_counter() - started
    return first


async def measure(poll: float, seconds: float, tokens: int, creates: int) -> dict[str, Any]:
    async with running_stack(RESPONSES_WORKER_POLL_DELAY=str(poll)) as stack:
        async with httpx.AsyncClient(timeout=120) as http:
            await stream_once(http, stack, {"text": "warm up"})  # (the pools open their connections)
            await asyncio.sleep(3)  # startup's own work is over
            groups = {"api": [stack.pids["api"]], "worker": [stack.pids["worker"]], **service_pids()}
            idle, woken = await cpu_during(groups, asyncio.sleep(seconds))
            words = " ".join(f"t{n}" for n in range(tokens))
            one_stream, _ = await cpu_during(groups, stream_once(http, stack, {"text": words, "delay": 0.005}))
            ttft = [await stream_once(http, stack, {"text": "a b c"}) for _ in range(creates)]
    return {
        "poll_delay_s": poll,
        "idle_cpu_share": {name: round(used / seconds, 4) for name, used in idle.items()},
        "idle_wakeups_per_s": {name: round(count / seconds, 1) for name, count in woken.items()},
        "one_stream_cpu_s_per_1000_tokens": {name: round(used * 1000 / tokens, 3) for name, used in one_stream.items()},
        "idle_ttft": percentiles(ttft),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=float, nargs="+", default=[0.01, 1.0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cost = wake_up_cost()
    results = [await measure(poll, args.seconds, args.tokens, args.creates) for poll in args.polls]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"commit": commit, "date": time.strftime("%Y-%m-%d"), "wake_up_cost": cost, "runs": results}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

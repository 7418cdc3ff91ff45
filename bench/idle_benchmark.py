"""What the system costs when nothing or little happens: CPU while idle, CPU per 1,000 tokens of
one stream, and time to first token on an idle system, for each worker poll interval asked for.

    python bench/idle_benchmark.py [--polls 0.01 1.0] [--seconds 20] [--tokens 1000] [--creates 20]

For each `RESPONSES_WORKER_POLL_DELAY` in `--polls` (run one after the other, on one machine, in
one run: the first is the baseline) it starts the stack (bench/stack.py), lets it settle, and
measures over `--seconds` the CPU of the API and worker processes, of Redis and of all Postgres
processes with nothing to do; then the CPU of the same processes (the fake runtime excluded)
while one stream of `--tokens` tokens runs (5 ms apart), per 1,000 tokens; then the time to the
first token of `--creates` streamed creates, one after another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds, percentiles
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


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:  # a Postgres backend that ended
            pass
    return total


async def cpu_during(groups: dict[str, list[int]], work: Any) -> dict[str, float]:
    """CPU seconds each group of processes used while `work` ran."""
    before = {name: cpu_of(pids) for name, pids in groups.items()}
    await work
    return {name: round(cpu_of(pids) - before[name], 3) for name, pids in groups.items()}


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
            idle = await cpu_during(groups, asyncio.sleep(seconds))
            words = " ".join(f"t{n}" for n in range(tokens))
            one_stream = await cpu_during(groups, stream_once(http, stack, {"text": words, "delay": 0.005}))
            ttft = [await stream_once(http, stack, {"text": "a b c"}) for _ in range(creates)]
    return {
        "poll_delay_s": poll,
        "idle_cpu_share": {name: round(used / seconds, 4) for name, used in idle.items()},
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
    results = [await measure(poll, args.seconds, args.tokens, args.creates) for poll in args.polls]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"commit": commit, "date": time.strftime("%Y-%m-%d"), "runs": results}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

"""Streaming overhead of the stateful path, measured against the same fake runtime streamed directly.

For each concurrency level it streams N responses of M tokens (a) through the whole system
(API → Postgres → arq → worker → runtime → durable event log → Redis → SSE) and (b) straight from
the fake Chat Completions runtime, in the same run, and reports TTFT p50/p99, tokens/s and
their ratios, plus the durable events/s the event writer committed and the steps of the time to
first token (TTFT_STEPS: the API's, then the worker's as its generation log lines tell them, then
the way back to the client). The fake's tokens are due on a clock from each answer's start, as a
GPU's steps are, so the machine's CPU contention does not slow its generation itself;
`--runtime-drift` makes it sleep between tokens instead.

    python bench/stream_benchmark.py                       # 1, 32 and 256 streams
    python bench/stream_benchmark.py --levels 32 --tokens 128 --token-delay 0.01
    python bench/stream_benchmark.py --levels 1 32 --ogx /tmp/ogx/bin/ogx   # OGX beside it (bench/ogx.py)
    python bench/stream_benchmark.py --levels 256 --relay   # and through a relay that only copies bytes

It needs Postgres and Redis as the tests do (DATABASE admin URL and REDIS_URL as in tests/conftest.py);
it creates and drops its own database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.measure import cpu_seconds, percentile, wakeups  # noqa: E402
from bench.ogx import MODEL as OGX_MODEL  # noqa: E402
from bench.ogx import Ogx, running_ogx  # noqa: E402
from bench.relay import running_relay  # noqa: E402
from bench.stack import Stack, admin, running_stack  # noqa: E402

TOKENS, TOKEN_DELAY = 64, 0.02  # an answer's tokens, and the seconds between them (a GPU's pace)


def fake_answer_script(tokens: int = TOKENS, delay: float = TOKEN_DELAY, drift: bool = False) -> str:
    """The input that has the fake runtime stream `tokens` tokens, `delay` seconds apart."""
    return "#fake " + json.dumps({"text": " ".join(["tok"] * tokens), "delay": delay, "drift": drift})


def of_named(names: tuple[str, ...], measure: Callable[[int], float]) -> float:
    """The measure of every process with one of these command names (all Postgres backends, say), summed."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if text[text.index("(") + 1 : text.rindex(")")] in names:
                total += measure(int(stat.parent.name))
        except OSError:  # (it ended meanwhile)
            continue
    return total


class CpuMeter:
    """CPU seconds spent (and wake-ups) by each part of the system during one measured phase."""

    def __init__(self, processes: dict[str, int]) -> None:
        self.processes = processes

    def snapshot(self, measure: Callable[[int], float] = cpu_seconds) -> dict[str, float]:
        shot = {name: measure(pid) for name, pid in self.processes.items()}
        shot["postgres"] = of_named(("postgres",), measure)
        shot["redis"] = of_named(("redis-server",), measure)
        return shot

    def wakeups(self) -> dict[str, float]:
        return self.snapshot(wakeups)

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: round(after[name] - before[name], 2) for name in before}


_RESPONSE_ID = re.compile(rb'"id":"(resp_[0-9A-Za-z]+)"')


@dataclass(frozen=True)
class Streamed:
    ttft: float
    tokens: int
    response_id: str | None  # (the direct path's answers have none)
    asked_at: float  # Unix time

    @property
    def first_at(self) -> float:
        return self.asked_at + self.ttft


@dataclass
class Run:
    streamed: list[Streamed]
    seconds: float
    errors: int

    @property
    def tokens(self) -> int:
        return sum(one.tokens for one in self.streamed)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def ratio_to(self, base: Run) -> float:
        """Its throughput against the base's (the direct path's, measured in the same run)."""
        return self.tokens_per_s / base.tokens_per_s

    def row(self) -> dict[str, float]:
        ttfts = [one.ttft for one in self.streamed]
        return {
            "ttft_p50_ms": 1000 * statistics.median(ttfts) if ttfts else float("nan"),
            "ttft_p99_ms": percentile(ttfts, 0.99),
            "tokens_per_s": self.tokens_per_s,
            "errors": self.errors,
        }


# Where a load streams from: URL, request body, headers, and the marker of a line carrying tokens.
Target = tuple[str, dict[str, object], dict[str, str], bytes]


async def stream_one(
    http: aiohttp.ClientSession, url: str, body: dict[str, object], headers: dict[str, str], delta_marker: bytes
) -> Streamed:
    """Streams one answer. Tokens are the fake's words, counted in the text (the server may
    coalesce several into one delta) without parsing each line, so the load generator leaves the
    CPU to the systems under test; only the lines before the first token are searched for the
    response's id."""
    asked_at, start = time.time(), time.perf_counter()
    first = None
    tokens = 0
    response_id = None
    async with http.post(url, json=body, headers=headers) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if delta_marker in line and (words := line.count(b"tok")):
                tokens += words
                first = first or time.perf_counter()
            elif first is None and response_id is None and (found := _RESPONSE_ID.search(line)):
                response_id = found[1].decode()
    return Streamed((first or time.perf_counter()) - start, tokens, response_id, asked_at)


TTFT_STEPS = (
    "request_to_accepted",  # the API's parsing and validation (to the response's `created_at`)
    # Its insert (unless it starts afresh: then stored beside its enqueue) and the job's serialization
    # (to the job's enqueue time).
    "accepted_to_enqueued",
    "enqueued_to_heard",  # the enqueue script, the wake-up message, the worker's listener
    "heard_to_taken",  # the take script
    "taken_to_claimed",  # the claim and the context's read
    # The runtime request (after the claim, or beside it for a response that starts afresh) and its
    # first output token.
    "taken_to_runtime_token",
    # From the later of the two: the first output's commit and its publish, as its worker saw them end.
    "both_to_committed",
    "committed_to_client",  # Redis's delivery, the API's SSE write, the client's read
)


def generation_lines(worker_logs: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    """Each generation's log line (workers/jobs/start_times.py), by response id."""
    lines: dict[str, dict[str, Any]] = {}
    for path in worker_logs:
        for text in path.read_text().splitlines():
            if '"responses_server.generation"' in text:
                line = json.loads(text)
                lines[line["response_id"]] = line
    return lines


async def ttft_steps(
    pg: asyncpg.Connection, streamed: list[Streamed], worker_logs: tuple[Path, ...]
) -> tuple[list[list[float]], list[float]]:
    """Each step of each response's time to first token, in seconds (TTFT_STEPS): from its request
    to the API's accepting it (its `created_at`), then its generation's start as its worker logged
    it, then to the client's first token. And each one's first output token from its worker's
    runtime request (the request's building included, as a client's TTFT includes its own): the
    runtime as the worker meets it, to set beside the direct path's TTFT. Only responses whose first
    output was committed before they ended are counted (the generation's `commit_ms`)."""
    rows = await pg.fetch(
        "SELECT id, extract(epoch FROM created_at) AS accepted FROM responses WHERE id = ANY($1::text[])",
        [one.response_id for one in streamed if one.response_id],
    )
    accepted = {row["id"]: float(row["accepted"]) for row in rows}
    lines = generation_lines(worker_logs)
    for _ in range(50):  # a line is written just after its response's end reached the client
        if all(one.response_id in lines for one in streamed if one.response_id in accepted):
            break
        await asyncio.sleep(0.1)
        lines = generation_lines(worker_logs)
    steps: list[list[float]] = [[] for _ in TTFT_STEPS]
    worker_requests: list[float] = []
    for one in streamed:
        line = lines.get(one.response_id or "")
        if one.response_id not in accepted or line is None or "commit_ms" not in line:
            continue
        moments = [one.asked_at, accepted[one.response_id], line["enqueued_at"]]
        for name in ("queued_ms", "take_ms"):
            moments.append(moments[-1] + line[name] / 1000)
        taken = moments[-1]
        claimed = taken + line["claim_ms"] / 1000
        runtime_token = taken + (line["ask_ms"] + line["first_token_ms"]) / 1000
        committed = runtime_token + line["commit_ms"] / 1000
        durations = [end - start for start, end in pairwise(moments)]
        durations += [claimed - taken, runtime_token - taken, committed - max(claimed, runtime_token)]
        durations.append(one.first_at - committed)
        for step, duration in zip(steps, durations, strict=True):
            step.append(duration)
        worker_requests.append(line["first_token_ms"] / 1000)
    return steps, worker_requests


async def load(
    url: str,
    body: dict[str, object],
    headers: dict[str, str],
    marker: bytes,
    concurrency: int,
    rounds: int,
    ramp: float,
) -> Run:
    """`concurrency` slots each stream `rounds` answers back to back; slot i starts at i·ramp/concurrency,
    so with ramp = one answer's duration the streams overlap as steady traffic would (ramp 0: a burst)."""
    # aiohttp: the load generator must cost as little CPU as possible on a machine it shares.
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        streamed: list[Streamed] = []
        errors = 0

        async def slot(index: int) -> None:
            nonlocal errors
            await asyncio.sleep(index * ramp / concurrency)
            for _ in range(rounds):
                try:
                    streamed.append(await stream_one(http, url, body, headers, marker))
                except Exception:
                    errors += 1

        start = time.perf_counter()
        await asyncio.gather(*(slot(i) for i in range(concurrency)))
        return Run(streamed, time.perf_counter() - start, errors)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--token-delay", type=float, default=TOKEN_DELAY, help="seconds between tokens, as a GPU paces")
    parser.add_argument(
        "--runtime-drift",
        action="store_true",
        help="the fake runtime sleeps between tokens, so that its lateness on a busy machine adds up"
        " (by default its tokens are due on a clock, as a GPU's steps are)",
    )
    parser.add_argument(
        "--light-runtime",
        action="store_true",
        help="stream from bench/light_runtime.py instead of the fake runtime: the same answers, a fraction of the CPU",
    )
    parser.add_argument("--rounds", type=int, default=3, help="answers each stream slot streams, back to back")
    parser.add_argument("--burst", action="store_true", help="start every stream at once instead of staggered")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--background", action="store_true", help="also stream background responses (background + stream) at each level"
    )
    parser.add_argument(
        "--ogx", metavar="COMMAND", help="also stream each level through OGX, its `ogx` command (bench/ogx.py)"
    )
    parser.add_argument(
        "--relay",
        action="store_true",
        help="also stream the direct path's requests through bench/relay.py (a bare TCP relay) at each level",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    async with running_stack(
        max_output_tokens=args.tokens * 2, worker_processes=args.workers, light_runtime=args.light_runtime
    ) as stack:
        with ExitStack() as resources:
            relay = None
            if args.relay:
                relay = resources.enter_context(running_relay(urlsplit(stack.runtime_url).port or 80))
            await _beside_ogx(args, stack, relay)


async def _beside_ogx(args: argparse.Namespace, stack: Stack, relay: tuple[str, int] | None) -> None:
    if not args.ogx:
        await _levels(args, stack, None, relay)
        return
    ogx_database = stack.database_url + "_ogx"
    name = urlsplit(ogx_database).path.lstrip("/")
    await admin(f'CREATE DATABASE "{name}"')
    try:
        with running_ogx(args.ogx, stack.runtime_url, ogx_database) as ogx:
            await _levels(args, stack, ogx, relay)
    finally:
        await admin(f'DROP DATABASE "{name}" WITH (FORCE)')


async def _levels(args: argparse.Namespace, stack: Stack, ogx: Ogx | None, relay: tuple[str, int] | None) -> None:
    """`relay`: bench/relay.py's URL and pid, to stream the direct path's requests through it too."""
    script = fake_answer_script(args.tokens, args.token_delay, args.runtime_drift)
    direct: Target = (
        f"{stack.runtime_url}/v1/chat/completions",
        {"model": "fake", "stream": True, "messages": [{"role": "user", "content": script}]},
        {},
        b'"content"',
    )
    full: Target = (
        f"{stack.api_url}/responses",
        {
            "model": "fake",
            "input": script,
            "stream": True,
            # Random padding could contain "tok" and skew the count; the direct path has none either.
            "stream_options": {"include_obfuscation": False},
        },
        stack.headers,
        b"response.output_text.delta",
    )
    # The same streams through OGX, with the meter of its process.
    through_ogx: tuple[Target, CpuMeter] | None = None
    if ogx is not None:
        body: dict[str, object] = {"model": OGX_MODEL, "input": script, "stream": True}
        through_ogx = (f"{ogx.url}/responses", body, {}, b"response.output_text.delta"), CpuMeter({"ogx": ogx.pid})
    ramp = 0.0 if args.burst else args.tokens * args.token_delay
    # Warm up both paths at the largest concurrency, as a server that has been up a while is:
    # connection pools at full size, statements prepared.
    await load(*full, max(args.levels), 1, 0.0)
    await load(*direct, max(args.levels), 1, 0.0)
    if through_ogx is not None:
        await load(*through_ogx[0], max(args.levels), 1, 0.0)
    # The direct path's requests through a relay that only copies bytes, with the meter of its process.
    through_relay: tuple[Target, CpuMeter] | None = None
    if relay is not None:
        relay_url, relay_pid = relay
        path = (f"{relay_url}/v1/chat/completions", *direct[1:])
        meter_pids = {"relay": relay_pid, "fake_runtime": stack.pids["fake_runtime"], "client": os.getpid()}
        through_relay = path, CpuMeter(meter_pids)
        await load(*path, max(args.levels), 1, 0.0)
    meter = CpuMeter({**stack.pids, "client": os.getpid()})
    results = []
    for level in args.levels:
        total = level * args.rounds
        pg = await asyncpg.connect(stack.database_url.replace("+asyncpg", ""))
        phase_start = await pg.fetchval("SELECT now()")
        cpu_before, woken_before = meter.snapshot(), meter.wakeups()
        ours = await load(*full, level, args.rounds, ramp)
        cpu_ours, woken = CpuMeter.spent(cpu_before, meter.snapshot()), CpuMeter.spent(woken_before, meter.wakeups())
        # From the log's rows, not its view: retention may mark finished logs purged mid-run.
        events = await pg.fetchval(
            "SELECT coalesce(sum(coalesce(e.run_length, 1)), 0) FROM event_log e"
            " JOIN responses r ON r.log_key = e.log_key WHERE r.created_at >= $1",
            phase_start,
        )
        steps, worker_requests = await ttft_steps(pg, ours.streamed, stack.worker_logs)
        claims = [sum(each) for each in zip(*steps[1:5], strict=True)]
        await pg.close()
        cpu_before = meter.snapshot()
        base = await load(*direct, level, args.rounds, ramp)
        cpu_direct = CpuMeter.spent(cpu_before, meter.snapshot())
        row = {
            "streams": level,
            "responses": total,
            "direct": base.row(),
            "responses_server": ours.row(),
            "durable_events_per_s": events / ours.seconds,
            # How long accepted responses waited for a worker to claim them (the queue's share of TTFT).
            "queue_to_claim_ms": {"p50": percentile(claims, 0.5), "p90": percentile(claims, 0.9)},
            # Where the time to first token went, the median of each step (each its own median).
            "ttft_steps_p50_ms": {name: percentile(step, 0.5) for name, step in zip(TTFT_STEPS, steps, strict=True)},
            # The runtime's first token from the worker's request, against `direct`'s ttft_p50_ms.
            "worker_request_ttft_p50_ms": percentile(worker_requests, 0.5),
            "cpu_seconds": {"responses_server": cpu_ours, "direct": cpu_direct},
            # Each process's wake-ups (voluntary context switches) a response, through our path.
            "wakeups_per_response": {name: round(count / total, 1) for name, count in woken.items()},
        }
        row["ttft_p50_overhead_ms"] = row["responses_server"]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"]
        row["throughput_ratio"] = ours.ratio_to(base)
        if through_ogx is not None:  # on the same runtime and Postgres
            path, ogx_meter = through_ogx
            cpu_before, woken_before = ogx_meter.snapshot(), ogx_meter.wakeups()
            theirs = await load(*path, level, args.rounds, ramp)
            spent = CpuMeter.spent(cpu_before, ogx_meter.snapshot())
            woken = CpuMeter.spent(woken_before, ogx_meter.wakeups())
            row["ogx"] = {
                **theirs.row(),
                "throughput_ratio": theirs.ratio_to(base),
                "cpu_seconds": {"ogx": spent["ogx"], "postgres": spent["postgres"]},
                "wakeups_per_response": {name: round(woken[name] / total, 1) for name in ("ogx", "postgres")},
            }
        if through_relay is not None:
            path, relay_meter = through_relay
            cpu_before = relay_meter.snapshot()
            relayed = await load(*path, level, args.rounds, ramp)
            row["relay"] = {
                **relayed.row(),
                "throughput_ratio": relayed.ratio_to(base),
                "cpu_seconds": CpuMeter.spent(cpu_before, relay_meter.snapshot()),
            }
        if args.background:  # the same streams created with background: true, right after
            url, body, headers, marker = full
            cpu_before = meter.snapshot()
            background = await load(url, {**body, "background": True}, headers, marker, level, args.rounds, ramp)
            row["background_stream"] = {
                **background.row(),
                "throughput_ratio": background.ratio_to(base),
                "cpu_seconds": CpuMeter.spent(cpu_before, meter.snapshot()),
            }
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

"""Webhooks: how soon a background response's webhook follows its end, and what webhooks cost.

    python bench/webhook_benchmark.py [--responses 1000] [--bursts 3] [--level 32] [--rounds 4]

Starts the stack (bench/stack.py) with a webhook receiver on loopback, a process of its own that
costs the machine little (bench/light_receiver.py).

- Latency (`--bursts` times): `--responses` background responses are created so that they all end within one second
  (each waits at the fake runtime until its turn in that second, then answers three words); an
  endpoint subscribed to response.completed receives them. The latency of one is its arrival at the
  receiver minus the time of the transaction that ended the response (its delivery's `created_at`,
  written in that transaction: invariant 8).
- Cost: the streaming benchmark's background streams (`--level` at once, 64 tokens one every 20 ms,
  bench/stream_benchmark.py) with an endpoint subscribed to every event type and without one, in
  alternating rounds. Reported per condition: tokens/s and the server's CPU seconds per 1,000
  tokens (API, worker, Postgres, Redis; the rounds with webhooks on include the deliveries, which
  each round waits for), each round's figures, and the ratio of the medians, on / off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.light_receiver import LightReceiver
from bench.measure import percentiles
from bench.stack import ROOT, Stack, running_stack
from bench.stream_benchmark import CpuMeter, load
from tests.conftest import free_port

ALL_EVENTS = "response.completed,response.failed,response.cancelled,response.incomplete"


def add_endpoint(stack: Stack, url: str, events: str) -> str:
    added = subprocess.run(
        [sys.executable, "-m", "app.cli", "webhooks", "add", "bench", url, "--events", events],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=stack.env,
    )
    return added.stdout.split()[3]  # "added webhook endpoint we_… for account …"


def remove_endpoint(stack: Stack, endpoint: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "app.cli", "webhooks", "remove", endpoint],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env=stack.env,
    )


def new_receiver() -> LightReceiver:
    return LightReceiver(free_port(), Path(tempfile.mkdtemp()) / "arrivals")


async def latency(stack: Stack, responses: int, lead: float) -> dict[str, Any]:
    receiver = new_receiver()
    endpoint = add_endpoint(stack, receiver.url, "response.completed")
    try:
        # Response i ends near `ends_from + i / responses`: all of them within one second, once
        # every create (sent `lead` seconds ahead) has been answered.
        ends_from = time.time() + lead
        limit = asyncio.Semaphore(64)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

            async def create(index: int) -> None:
                async with limit:
                    wait = ends_from + index / responses - time.time()
                    script = "#fake " + json.dumps({"text": "done and done", "first_delay": max(wait, 0.0)})
                    body = {"model": "fake", "input": script, "background": True}
                    async with http.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
                        answer.raise_for_status()

            await asyncio.gather(*(create(i) for i in range(responses)))
        created_by = time.time()
        await receiver.wait_for(responses, timeout=lead + 120)
        await asyncio.sleep(1)  # (a duplicate would show here)
        arrived = receiver.arrivals()
        pg = await asyncpg.connect(stack.database_url.replace("+asyncpg", ""))
        try:
            rows = await pg.fetch(
                "SELECT id, extract(epoch FROM created_at)::float8 AS ended FROM webhook_deliveries"
                " WHERE endpoint_id = $1",
                endpoint,
            )
        finally:
            await pg.close()
        ended = {row["id"]: row["ended"] for row in rows}
        latencies = [at - ended[webhook_id] for webhook_id, at in arrived]
        return {
            "responses": responses,
            "webhooks_received": len(arrived),
            "distinct_webhook_ids": len({webhook_id for webhook_id, _ in arrived}),
            "creates_done_before_the_first_end": created_by < ends_from,
            "ends_spread_s": round(max(ended.values()) - min(ended.values()), 3),
            "latency": {**percentiles(latencies), "max_ms": round(1000 * max(latencies), 2)},
        }
    finally:
        remove_endpoint(stack, endpoint)
        receiver.stop()


async def cost(stack: Stack, level: int, rounds: int) -> dict[str, Any]:
    tokens = 64
    script = "#fake " + json.dumps({"text": " ".join(["tok"] * tokens), "delay": 0.02})
    body = {
        "model": "fake",
        "input": script,
        "stream": True,
        "background": True,
        "stream_options": {"include_obfuscation": False},
    }
    stream = (f"{stack.api_url}/responses", body, stack.headers, b"response.output_text.delta")
    receiver = new_receiver()
    meter = CpuMeter(stack.pids)
    server = [name for name in meter.snapshot() if name != "fake_runtime"]
    ramp = tokens * 0.02
    await load(*stream, level, 1, 0.0)  # warm up
    figures: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    try:
        for round_ in range(rounds):
            for condition in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                endpoint = add_endpoint(stack, receiver.url, ALL_EVENTS) if condition == "on" else None
                expected = len(receiver.arrivals()) + level * 3
                before = meter.snapshot()
                run = await load(*stream, level, 3, ramp)
                if endpoint is not None:
                    await receiver.wait_for(expected, timeout=60)
                spent = CpuMeter.spent(before, meter.snapshot())
                if endpoint is not None:
                    remove_endpoint(stack, endpoint)
                figures[condition].append(
                    {
                        "tokens_per_s": round(run.tokens / run.seconds, 1),
                        "server_cpu_s_per_1000_tokens": round(1000 * sum(spent[n] for n in server) / run.tokens, 3),
                        **{f"{n}_cpu_s_per_1000_tokens": round(1000 * spent[n] / run.tokens, 3) for n in server},
                        "errors": run.errors,
                    }
                )
    finally:
        receiver.stop()

    def median(condition: str, figure: str) -> float:
        return statistics.median(row[figure] for row in figures[condition])

    return {
        "streams": level,
        "rounds": figures,
        "throughput_ratio_on_off": round(median("on", "tokens_per_s") / median("off", "tokens_per_s"), 3),
        "cpu_ratio_on_off": round(
            median("on", "server_cpu_s_per_1000_tokens") / median("off", "server_cpu_s_per_1000_tokens"), 3
        ),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--lead", type=float, default=20.0, help="seconds from the first create to the first end")
    parser.add_argument("--bursts", type=int, default=3, help="latency measurements, one after another")
    parser.add_argument("--level", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    async with running_stack(
        max_output_tokens=256,
        RESPONSES_WEBHOOK_ALLOW="127.0.0.1/32",
        RESPONSES_WORKER_MAX_JOBS=str(args.responses + 64),
    ) as stack:
        bursts = []
        for _ in range(args.bursts):
            bursts.append(await latency(stack, args.responses, args.lead))
            print(json.dumps(bursts[-1]), flush=True)
        results: dict[str, Any] = {"latency": bursts}
        results["cost"] = await cost(stack, args.level, args.rounds)
        print(json.dumps(results["cost"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

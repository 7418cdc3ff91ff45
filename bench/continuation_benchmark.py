"""How long a client's stream pauses when the worker generating it goes, with a second worker alive.

    python bench/continuation_benchmark.py [--rounds 3] [--lease 10]

Starts the stack (bench/stack.py) with two workers and a model whose server continues answers
(the fake runtime, as vLLM's `continue_final_message`). In each round, for each way of going, a
background stream of 200 tokens (one every 20 ms) is followed from its start; at its 50th token the
worker generating it is sent SIGTERM (it hands the generation over at once) or SIGKILL (the
generation is continued once its lease, `--lease` seconds, has lapsed and a housekeeping pass, every
second here, finds it); a worker is then started in its place. The pause is the longest gap between
two events the follower received; a stream is whole when its text is the answer's, each word once.
The baselines, in the same run, are the time to first token of a fresh response (what a
continuation costs at least: one prompt prefill) and the longest gap of a stream whose worker
stays (the commit interval's cadence).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import percentiles
from bench.stack import Stack, running_stack

TOKENS = 200
TEXT = " ".join(f"w{i}" for i in range(TOKENS))
SCRIPT = "#fake " + json.dumps({"text": TEXT, "delay": 0.02})


async def worker_of(stack: Stack, response_id: str) -> int:
    conn = await asyncpg.connect(stack.database_url.replace("+asyncpg", ""))
    try:
        worker_id: str = await conn.fetchval("SELECT worker_id FROM responses WHERE id = $1", response_id)
    finally:
        await conn.close()
    return int(worker_id.rsplit(":", 1)[1])


async def follow(http: aiohttp.ClientSession, stack: Stack, going: signal.Signals | None) -> dict[str, Any]:
    """Follows a new background stream to its end; at its 50th token, sends `going` to its worker."""
    body = {"model": "fake", "input": SCRIPT, "background": True, "stream": True}
    arrivals: list[float] = []
    text, last, response_id, started, killed = "", "", "", time.monotonic(), False
    async with http.post(f"{stack.api_url}/responses", headers=stack.headers, json=body) as answer:
        async for line in answer.content:
            if line.startswith(b"event: "):
                arrivals.append(time.monotonic())
                last = line[7:].strip().decode()
                continue
            if not line.startswith(b"data: "):
                continue
            data = json.loads(line[6:])
            response_id = response_id or data["response"]["id"]
            if last != "response.output_text.delta":
                continue
            if not text:
                ttft = arrivals[-1] - started
            text += data["delta"]  # (deltas that waited for one commit come as one)
            if len(text.split()) >= 50 and going is not None and not killed:
                killed = True
                os.kill(await worker_of(stack, response_id), going)
    pause = max(later - earlier for earlier, later in itertools.pairwise(arrivals))
    return {"tokens": len(text.split()), "whole_text": text == TEXT, "end": last, "ttft_s": ttft, "pause_s": pause}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"baseline": [], "SIGTERM": [], "SIGKILL": []}
    continuing = 'continuation = "continue_final_message"\n'
    async with running_stack(
        worker_processes=2,
        fake_model_fields=continuing,
        RESPONSES_LEASE_SECONDS=str(args.lease),
        RESPONSES_HOUSEKEEPING_SECONDS="1",
    ) as stack:
        extra = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
            await follow(http, stack, None)  # warm up
            for _ in range(args.rounds):
                results["baseline"].append(await follow(http, stack, None))
                for going in (signal.SIGTERM, signal.SIGKILL):
                    results[going.name].append(await follow(http, stack, going))
                    extra.append(stack.start_worker())  # two alive again
                    await asyncio.sleep(3)
        for process in extra:
            process.terminate()
            process.wait(30)
    summary = {
        "lease_s": args.lease,
        "ttft_baseline": percentiles([r["ttft_s"] for r in results["baseline"]]),
        **{
            f"pause_{how}": percentiles([r["pause_s"] for r in results[how]])
            for how in ("baseline", "SIGTERM", "SIGKILL")
        },
        "whole": all(r["whole_text"] and r["end"] == "response.completed" for rs in results.values() for r in rs),
        "rounds": results,
    }
    print(json.dumps(summary), flush=True)
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

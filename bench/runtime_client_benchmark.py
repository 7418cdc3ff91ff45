"""The worker's two lanes to a model server, side by side: its own plain connections
(workers/runtimes/plain_http.py) against aiohttp, in alternating rounds of one run, each asking the
same fake runtime for the same streamed answers, on uvloop as the worker runs.

    python bench/runtime_client_benchmark.py [--answers 400] [--rounds 4] [--pause-ms 20] [--out F]

Each answer is "Echo: …" of six words in one chunk each; the client reads it to its end. A
pause between answers lets the processes sleep, as they do between a GPU's tokens. Prints, per
round and as medians, each lane's time to its first text piece (p50, from the request's start,
the request's encoding included) and its CPU a request (the client process's, request and
answer), and the ratios plain/aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import free_port, serving
from workers.runtimes.http_client import HttpClient, RequestTimeouts

TIMEOUTS = RequestTimeouts(connect=5.0, read=30.0)
BODY = {
    "model": "m",
    "stream": True,
    "messages": [{"role": "user", "content": "one two three four five"}],
}


async def first_piece_seconds(http: HttpClient, url: str) -> float:
    started, first = time.perf_counter(), 0.0

    def consume(piece: bytes) -> bool:
        nonlocal first
        if not first and b'"content"' in piece:
            first = time.perf_counter()
        return False

    async with http.post_json(url, BODY, {}, TIMEOUTS) as answer:
        await answer.deliver(consume)
    if not first:
        raise RuntimeError("the answer had no text")
    return first - started


async def lane_round(http: HttpClient, url: str, answers: int, pause: float) -> dict[str, float]:
    firsts: list[float] = []
    cpu = 0.0
    for _ in range(answers):
        await asyncio.sleep(pause)
        before = time.process_time()
        firsts.append(await first_piece_seconds(http, url))
        cpu += time.process_time() - before
    return {"first_piece_p50_ms": statistics.median(firsts) * 1000, "cpu_us_per_request": cpu / answers * 1e6}


async def measure(url: str, answers: int, rounds: int, pause: float) -> dict[str, object]:
    lanes = {"plain": HttpClient(), "aiohttp": HttpClient(plain_connections=False)}
    for http in lanes.values():  # warm: connections open, code paths run
        await lane_round(http, url, 20, 0.0)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in lanes}
    for number in range(rounds):
        order = list(lanes.items()) if number % 2 == 0 else list(lanes.items())[::-1]
        for name, http in order:
            results[name].append(await lane_round(http, url, answers, pause))
        print(json.dumps({"round": number + 1, **{name: runs[-1] for name, runs in results.items()}}), flush=True)
    for http in lanes.values():
        await http.aclose()
    medians = {
        name: {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}
        for name, runs in results.items()
    }
    ratios = {key: round(medians["plain"][key] / medians["aiohttp"][key], 3) for key in medians["plain"]}
    return {"answers_per_round": answers, "pause_ms": pause * 1000, "medians": medians, "plain_over_aiohttp": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=400, help="answers a lane asks for in a round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pause-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    port = free_port()
    with serving("-m", "tests.fake_runtime", "--port", str(port), port=port) as base:
        result = uvloop.run(measure(f"{base}/v1/chat/completions", args.answers, args.rounds, args.pause_ms / 1000))
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

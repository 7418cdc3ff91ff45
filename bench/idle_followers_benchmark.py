"""Thousands of idle SSE followers on one API process: errors, keep-alive cadence, CPU.

    python bench/idle_followers_benchmark.py [--followers 10000] [--responses 20] [--seconds 20]

Starts the stack (bench/stack.py), creates `--responses` background responses that stay in
progress without output (the fake runtime waits an hour before its first token), then opens
`--followers` streams on them (`GET /v1/responses/{id}?stream=true`), a few hundred at a time.
Once all are open it measures, over `--seconds`: the API process's CPU against the same window
with the same responses and no follower (the baseline, measured first), the gaps between each
follower's keep-alives (`RESPONSES_FOLLOW_IDLE_SECONDS`, 5 s), and every error a follower met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds, rss_mib
from bench.stack import Stack, running_stack

WAVE = 250


async def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process used over the next `seconds`."""
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return round((cpu_seconds(pid) - before) / seconds, 4)


class Follower:
    def __init__(self) -> None:
        self.keep_alives: list[float] = []
        self.error: str | None = None
        self.opened = asyncio.Event()

    async def run(self, http: aiohttp.ClientSession, stack: Stack, response_id: str) -> None:
        url = f"{stack.api_url}/responses/{response_id}"
        try:
            async with http.get(url, params={"stream": "true"}, headers=stack.headers) as answer:
                if answer.status != 200:
                    self.error = f"HTTP {answer.status}"
                    return
                self.opened.set()
                async for line in answer.content:
                    if line.startswith(b": keep-alive"):
                        self.keep_alives.append(time.monotonic())
                    elif line.startswith(b"event: error"):
                        self.error = "event: error"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = type(exc).__name__
        finally:
            self.opened.set()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--followers", type=int, default=10_000)
    parser.add_argument("--responses", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    async with running_stack() as stack:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            script = "#fake " + json.dumps({"first_delay": 3600, "text": "never"})
            ids = []
            for _ in range(args.responses):  # (only a response created streaming can be streamed back)
                body = {"model": "fake", "input": script, "background": True, "stream": True}
                async with http.post(f"{stack.api_url}/responses", headers=stack.headers, json=body) as answer:
                    async for line in answer.content:  # the first event names it; then let go
                        if line.startswith(b"data: "):
                            ids.append(json.loads(line[6:])["response"]["id"])
                            break
            api = stack.pids["api"]
            await asyncio.sleep(2)  # the worker has claimed them
            baseline = await cpu_share(api, args.seconds)
            rss_before = rss_mib(api)
            followers = [Follower() for _ in range(args.followers)]
            tasks = []
            opening = time.monotonic()
            for start in range(0, args.followers, WAVE):
                wave = followers[start : start + WAVE]
                tasks += [
                    asyncio.create_task(f.run(http, stack, ids[(start + n) % len(ids)])) for n, f in enumerate(wave)
                ]
                await asyncio.gather(*(f.opened.wait() for f in wave))
            opened_in = time.monotonic() - opening
            await asyncio.sleep(6)  # a full idle period: every follower is on the idle clock
            window_start = time.monotonic()
            with_followers = await cpu_share(api, args.seconds)
            window_end = time.monotonic()
            rss_after = rss_mib(api)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for response_id in ids:
                async with http.post(f"{stack.api_url}/responses/{response_id}/cancel", headers=stack.headers):
                    pass
    gaps = [
        later - earlier
        for f in followers
        for earlier, later in zip(f.keep_alives, f.keep_alives[1:], strict=False)
        if window_start <= later <= window_end
    ]
    ordered = sorted(gaps)
    results: dict[str, Any] = {
        "followers": args.followers,
        "responses": args.responses,
        "opened_seconds": round(opened_in, 1),
        "errors": dict(Counter(f.error for f in followers if f.error)),
        "api_cpu_idle_no_followers": baseline,
        "api_cpu_idle_with_followers": with_followers,
        "keep_alive_gap_s": {
            "p50": round(statistics.median(ordered), 2) if ordered else None,
            "p99": round(ordered[int(len(ordered) * 0.99)], 2) if ordered else None,
            "max": round(ordered[-1], 2) if ordered else None,
            "gaps": len(ordered),
        },
        "api_rss_mib": {"before": round(rss_before, 1), "with_followers": round(rss_after, 1)},
    }
    print(json.dumps(results), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

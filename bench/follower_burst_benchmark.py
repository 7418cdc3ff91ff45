"""A burst of SSE followers on one API process: how many are refused, whether each gets every
event once and in order, how long each waits for its first event, and the API's CPU.

    python bench/follower_burst_benchmark.py [--followers 10000] [--responses 20] [--within 1.0]

Starts the stack (bench/stack.py), creates `--responses` background streaming responses of
`--tokens` tokens (one every 50 ms: 5 s for the default 100), then opens `--followers` streams on them
(`GET /v1/responses/{id}?stream=true&starting_after=-1`: each replays the log from its start,
then follows it live), all started within `--within` seconds. The baseline, measured first in
the same run, is one follower alone on one such response.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds, percentiles
from bench.stack import Stack, running_stack


class Follower:
    def __init__(self) -> None:
        self.status = 0
        self.numbers: list[int] = []
        self.error: str | None = None
        self.first_event_after: float | None = None
        self.answered_after: float | None = None
        self.ended = False

    async def run(self, stack: Stack, response_id: str) -> None:
        """Reads the stream over a bare socket, scanning bytes: the load generator shares the
        machine, and a full HTTP client parsing every line took a core of its own."""
        started = time.monotonic()
        host, port = stack.api_url.split("//")[1].split("/")[0].split(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                f"GET /v1/responses/{response_id}?stream=true&starting_after=-1 HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: {stack.headers['Authorization']}\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            self.status = int(head.split(b" ", 2)[1])
            self.answered_after = time.monotonic() - started
            rest = b""
            while self.status == 200 and not self.ended and (data := await reader.read(65536)):
                whole, _, rest = (rest + data).rpartition(b"\n\n")  # events end with a blank line
                if not whole:
                    continue
                if self.first_event_after is None:
                    self.first_event_after = time.monotonic() - started
                self.numbers += [int(n) for n in _NUMBER.findall(whole)]
                kinds = _KIND.findall(whole)
                self.error = "event: error" if b"error" in kinds else self.error
                self.ended = b"response.completed" in kinds
            writer.close()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = type(exc).__name__

    @property
    def whole(self) -> bool:
        return self.ended and self.numbers == list(range(len(self.numbers)))


_NUMBER = re.compile(rb'"sequence_number":(\d+)')
_KIND = re.compile(rb"event: ([\w.]+)")


async def create(http: aiohttp.ClientSession, stack: Stack, tokens: int) -> str:
    script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(tokens)), "delay": 0.05})
    body = {"model": "fake", "input": script, "background": True, "stream": True}
    async with http.post(f"{stack.api_url}/responses", headers=stack.headers, json=body) as answer:
        async for line in answer.content:  # the first event names it; then let go
            if line.startswith(b"data: "):
                response_id: str = json.loads(line[6:])["response"]["id"]
                return response_id
    raise RuntimeError("no response was created")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--followers", type=int, default=10_000)
    parser.add_argument("--responses", type=int, default=20)
    parser.add_argument("--within", type=float, default=1.0, help="seconds over which the followers connect")
    parser.add_argument("--tokens", type=int, default=100, help="tokens of each answer, one every 50 ms")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    async with running_stack() as stack:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            alone = Follower()
            await alone.run(stack, await create(http, stack, args.tokens))
            ids = [await create(http, stack, args.tokens) for _ in range(args.responses)]
            followers = [Follower() for _ in range(args.followers)]
            api = stack.pids["api"]
            cpu_before, client_before, opening = cpu_seconds(api), time.process_time(), time.monotonic()
            tasks = []
            for n, follower in enumerate(followers):
                tasks.append(asyncio.create_task(follower.run(stack, ids[n % len(ids)])))
                due = opening + args.within * (n + 1) / args.followers
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
            connected_in = time.monotonic() - opening
            await asyncio.gather(*tasks)
            took, api_cpu = time.monotonic() - opening, cpu_seconds(api) - cpu_before
            client_cpu = time.process_time() - client_before
    waits = [f.first_event_after for f in followers if f.first_event_after is not None]
    results: dict[str, Any] = {
        "followers": args.followers,
        "responses": args.responses,
        "connected_within_s": round(connected_in, 2),
        "refused": dict(Counter(f.status for f in followers if f.status != 200)),
        "errors": dict(Counter(f.error for f in followers if f.error)),
        "whole_and_in_order": sum(f.whole for f in followers),
        "answered": percentiles([f.answered_after for f in followers if f.answered_after is not None]),
        "first_event": percentiles(waits) if waits else None,
        "first_event_alone_ms": round(1000 * (alone.first_event_after or 0), 2),
        "events_delivered": sum(len(f.numbers) for f in followers),
        "seconds": round(took, 1),
        "api_cpu_seconds": round(api_cpu, 2),
        "client_cpu_seconds": round(client_cpu, 2),  # the load generator shares the machine
    }
    print(json.dumps(results), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

"""What a Postgres primary failover costs the clients, with synchronous and with asynchronous
replication, in two ways of failing, in the same run.

    python bench/failover_benchmark.py [--rounds 3] [--streams 30] [--pause 0.5]

Each round starts a primary and a standby streaming from it (tests/private_postgres.py, Debian's
PostgreSQL binaries, the standby made by pg_basebackup), the stack on them (bench/stack.py) with
DATABASE_URL naming both (`target_session_attrs=read-write`), and `--streams` streamed responses
(one in three in the background) of 60 tokens, one every 50 ms. Once every stream has events,
the standby's WAL receiver is paused (SIGSTOP) for `--pause` seconds, the primary is killed
(`pg_ctl stop -m immediate`), and then:

- answers lost: the receiver goes on (SIGCONT) and reads the WAL waiting in its socket: the
  commits that were in flight reach the standby, but their answers never reached the workers;
- standby behind: the receiver is killed, and that WAL with it: the standby lacks the last
  `--pause` seconds of commits, as a standby across a slow network would.

A second later the standby is promoted. Each stream is then read to its end, and each response
retrieved. Counted per mode:

- whole: the stream ended `response.completed` with every event once, in order, its text the
  answer's, and the stored response's too;
- lost events: the stream ended, but not whole (events it had shown that the promoted standby
  never received, or stored twice);
- failed or cut: the stream ended with an error, or `response.failed`, or did not end in time;
- pause: the longest gap between two events of a stream, across the failover (median, max).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import Stack, running_stack
from tests.private_postgres import replicated_pair

TOKENS = 60


def _script(n: int) -> tuple[str, dict[str, Any]]:
    text = " ".join(f"s{n}w{i}" for i in range(TOKENS))
    body = {"model": "fake", "input": "#fake " + json.dumps({"text": text, "delay": 0.05}), "stream": True}
    return text, {**body, "background": n % 3 == 0}


async def _follow(
    session: aiohttp.ClientSession, stack: Stack, body: dict[str, Any], seen: list[tuple[float, Any]]
) -> None:
    async with session.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
        async for line in answer.content:
            if line.startswith(b"data: "):
                seen.append((time.monotonic(), json.loads(line[6:])))


def _verdict(text: str, seen: list[tuple[float, Any]], stored: dict[str, Any] | None) -> str:
    events = [event for _, event in seen]
    if not events or events[-1]["type"] != "response.completed":
        return "failed or cut"
    numbers = [event["sequence_number"] for event in events]
    streamed = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    whole = numbers == list(range(len(numbers))) and streamed == text
    if whole and stored is not None and stored.get("status") == "completed" and _text(stored) == text:
        return "whole"
    return "lost events"


def _text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output", [])
        if item["type"] == "message"
        for part in item["content"]
    )


async def one_round(synchronous: bool, scenario: str, streams: int, pause: float) -> dict[str, Any]:
    with replicated_pair(synchronous=synchronous) as (primary, standby):
        primary.create_database("responses")
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        url = f"postgresql://postgres@{hosts}/responses?target_session_attrs=read-write"
        async with running_stack(database_url=url, RESPONSES_LEASE_SECONDS="30") as stack:
            scripts = [_script(n) for n in range(streams)]
            seen: list[list[tuple[float, Any]]] = [[] for _ in scripts]
            timeout = aiohttp.ClientTimeout(total=120)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
                followers = [
                    asyncio.create_task(_follow(session, stack, body, seen[n])) for n, (_, body) in enumerate(scripts)
                ]
                while not all(len(events) > 5 for events in seen):
                    await asyncio.sleep(0.05)
                receiver = int(await asyncio.to_thread(standby.value, "SELECT pid FROM pg_stat_wal_receiver"))
                os.kill(receiver, signal.SIGSTOP)
                await asyncio.sleep(pause)
                await asyncio.to_thread(primary.kill)
                # The WAL sent meanwhile waits in the receiver's socket: read once it goes on (the
                # commits in flight reach the standby, their answers never reach the workers), or
                # lost with it (the standby is `pause` behind, as one across a slow network).
                os.kill(receiver, signal.SIGCONT if scenario == "answers lost" else signal.SIGKILL)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(standby.promote)
                await asyncio.wait(followers, timeout=100)
                stored: list[dict[str, Any] | None] = []
                for events in seen:
                    response_id = events[0][1]["response"]["id"] if events else None
                    if response_id is None:
                        stored.append(None)
                        continue
                    async with session.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as got:
                        stored.append(await got.json() if got.status == 200 else None)
    verdicts = [_verdict(text, events, kept) for (text, _), events, kept in zip(scripts, seen, stored, strict=True)]
    pauses = [max((b - a for (a, _), (b, _) in itertools.pairwise(events)), default=0.0) for events in seen]
    return {
        "whole": verdicts.count("whole"),
        "lost events": verdicts.count("lost events"),
        "failed or cut": verdicts.count("failed or cut"),
        "pause_s_median": round(statistics.median(pauses), 2),
        "pause_s_max": round(max(pauses), 2),
    }


SCENARIOS = ("answers lost", "standby behind")


async def main(rounds: int, streams: int, pause: float) -> dict[str, Any]:
    modes = [(f"{scenario}, {kind}", synchronous, scenario) for scenario in SCENARIOS
             for kind, synchronous in (("synchronous", True), ("asynchronous", False))]  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in modes}
    for round_ in range(rounds):
        for name, synchronous, scenario in modes if round_ % 2 == 0 else modes[::-1]:
            results[name].append(await one_round(synchronous, scenario, streams, pause))
    return {"rounds": rounds, "streams": streams, "pause_s": pause, **results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=30)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds the standby's WAL receiver is paused")
    parser.add_argument("--out", type=Path, help="also write the results here, as JSON")
    args = parser.parse_args()
    figures = asyncio.run(main(args.rounds, args.streams, args.pause))
    print(json.dumps(figures, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")

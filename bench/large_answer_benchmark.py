"""Long and large answers: polling a running response with a long log, and a 10 MB answer in each mode.

    python bench/large_answer_benchmark.py [--logs 1000 12000 50000] [--polls 50] [--megabytes 10]

Starts the stack (bench/stack.py), then:

1. Polling: a background response kept running (the fake runtime waits an hour before its first
   token) is given a log of N text deltas, appended as the worker's writer appends them; then it
   is retrieved `--polls` times, each poll after one more delta, as a client polls a response that
   is still generating. Baselines in the same run: the same polls with a 10-event log, and what
   one poll cost before output snapshots, folding the whole log (measured in this process on the
   same database). Then the whole log is streamed 5 times (`GET …?stream=true`) and resumed 5
   times from its middle (`starting_after`), each until its last event; then again once the
   response was cancelled (its log folded).
2. A `--megabytes` answer (the fake runtime's `filler`, 256 KiB chunks) as JSON and as a stream,
   stored and not, and in the background (streamed, then retrieved): seconds to the whole answer,
   the largest message on the events channel meanwhile, and the bytes its events take in Postgres
   per byte of answer. Baseline: the same with a 10 KB answer.
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

import aiohttp
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.protocol import accumulate
from app.queue.redis_keys import events_channel
from app.storage import events as events_db
from bench.measure import percentiles
from bench.stack import Stack, running_stack


def delta(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
    }


async def running_response(http: aiohttp.ClientSession, stack: Stack) -> str:
    """A background response that waits an hour for its first token; streamable, so that its log
    can be replayed (its creating stream is left after its first event)."""
    script = "#fake " + json.dumps({"first_delay": 3600, "text": "x"})
    body = {"model": "fake", "input": script, "background": True, "stream": True}
    async with http.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
        async for line in answer.content:
            if line.startswith(b"data: "):
                response_id: str = json.loads(line[6:])["response"]["id"]
                break
    for _ in range(100):
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            if (await answer.json())["status"] == "in_progress":
                return response_id
        await asyncio.sleep(0.1)
    raise RuntimeError("the response never started")


async def poll_cost(http: aiohttp.ClientSession, stack: Stack, log_events: int, polls: int) -> dict[str, Any]:
    response_id = await running_response(http, stack)
    engine = create_async_engine(stack.database_url)
    item = {"id": "msg_bench", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    opening = [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.content_part.added",
            "item_id": "msg_bench",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
    ]
    async with engine.begin() as conn:
        await events_db.append(conn, response_id, opening)
        for start in range(0, log_events, 1000):
            count = min(1000, log_events - start)
            await events_db.append(conn, response_id, [delta("msg_bench", " tok") for _ in range(count)])
    samples = []
    for _ in range(polls):
        async with engine.begin() as conn:
            await events_db.append(conn, response_id, [delta("msg_bench", " tok")])
        started = time.perf_counter()
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            polled = await answer.json()
        samples.append(time.perf_counter() - started)
    expected = " tok" * (log_events + polls)
    assert polled["output"][0]["content"][0]["text"] == expected, "a poll returned the wrong output"
    folds = []
    for _ in range(min(polls, 10)):  # one poll before snapshots: the whole log read and folded
        started = time.perf_counter()
        async with engine.connect() as conn:
            events = await events_db.events_after(conn, response_id, -1, None)
        accumulate.output_so_far(event.data() for event in events)
        folds.append(time.perf_counter() - started)
    async with engine.connect() as conn:
        last = (await events_db.log_ends(conn, [response_id]))[response_id][1]
    replays = [await replay_seconds(http, stack, response_id, None, last) for _ in range(5)]
    resumes = [await replay_seconds(http, stack, response_id, last // 2, last) for _ in range(5)]
    # Ended (cancelled), its log is folded: the same reads of the folded log.
    async with http.post(f"{stack.api_url}/responses/{response_id}/cancel", headers=stack.headers) as answer:
        assert (await answer.json())["status"] == "cancelled"
    async with engine.connect() as conn:
        last = (await events_db.log_ends(conn, [response_id]))[response_id][1]
    await engine.dispose()
    ended_replays = [await replay_seconds(http, stack, response_id, None, last) for _ in range(5)]
    ended_resumes = [await replay_seconds(http, stack, response_id, last // 2, last) for _ in range(5)]
    return {
        "log_events": log_events,
        "poll": percentiles(samples),
        "whole_log_fold": percentiles(folds),
        "replay_whole_log": percentiles(replays),
        "resume_from_the_middle": percentiles(resumes),
        "ended_replay_whole_log": percentiles(ended_replays),
        "ended_resume_from_the_middle": percentiles(ended_resumes),
    }


async def replay_seconds(
    http: aiohttp.ClientSession, stack: Stack, response_id: str, after: int | None, last: int
) -> float:
    """Seconds to stream a response's log from the start (or after `after`) to event `last`."""
    params = {"stream": "true"} | ({} if after is None else {"starting_after": str(after)})
    number = b'"sequence_number":%d' % last  # then "}" or, in a delta, ',"obfuscation":…'
    started = time.perf_counter()
    async with http.get(f"{stack.api_url}/responses/{response_id}", params=params, headers=stack.headers) as answer:
        async for line in answer.content:
            if line.startswith(b"data: ") and (number + b"}" in line or number + b"," in line):
                break
    return time.perf_counter() - started


async def largest_message(redis: Redis, channel: str, done: asyncio.Event) -> int:
    largest = 0
    async with redis.pubsub() as pubsub:
        await pubsub.subscribe(channel)
        while not done.is_set():
            message = await pubsub.get_message(timeout=0.1)
            if message and message["type"] == "message":
                largest = max(largest, len(message["data"]))
    return largest


async def one_answer(http: aiohttp.ClientSession, stack: Stack, size: int, mode: str) -> tuple[float, str | None]:
    """Seconds to the whole answer in `mode`, and its response id when stored."""
    script = {"filler": {"bytes": size, "chunk_bytes": 256 * 1024}}
    body: dict[str, Any] = {"model": "fake", "input": "#fake " + json.dumps(script)}
    body["store"] = not mode.endswith("unstored")
    body["stream"] = mode.startswith("stream") or mode == "background"
    body["background"] = mode == "background"
    started = time.perf_counter()
    response_id, text_bytes = None, 0
    async with http.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
        if body["stream"]:  # (read whole: an SSE line of a large answer is longer than aiohttp reads as one)
            *_, last = (await answer.read()).rstrip().split(b"\n\n")
            final = json.loads(last.split(b"\ndata: ", 1)[1])["response"]
            response_id, text_bytes = final["id"], len(final["output"][0]["content"][0]["text"])
        else:
            final = await answer.json()
            response_id, text_bytes = final["id"], len(final["output"][0]["content"][0]["text"])
    if mode == "background":
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            text_bytes = len((await answer.json())["output"][0]["content"][0]["text"])
    took = time.perf_counter() - started
    assert text_bytes == size, f"{mode}: {text_bytes} bytes of {size}"
    return took, response_id if body["store"] else None


async def stored_bytes(stack: Stack, response_id: str) -> int:
    engine = create_async_engine(stack.database_url)
    async with engine.connect() as conn:
        total = await conn.scalar(
            text(
                "SELECT coalesce(sum(octet_length(e.payload)), 0) FROM event_log e "
                "JOIN responses r ON r.log_key = e.log_key WHERE r.id = :id"
            ),
            {"id": response_id},
        )
    await engine.dispose()
    return int(total or 0)


async def answers(http: aiohttp.ClientSession, stack: Stack, size: int) -> dict[str, Any]:
    redis = Redis.from_url(stack.redis_url)
    done = asyncio.Event()
    channel = events_channel(stack.queue_name)
    watcher = asyncio.create_task(largest_message(redis, channel, done))
    await asyncio.sleep(0.2)
    results: dict[str, Any] = {}
    for mode in ("json", "json_unstored", "stream", "stream_unstored", "background"):
        took, response_id = await one_answer(http, stack, size, mode)
        results[mode] = {"seconds": round(took, 3)}
        if response_id is not None:
            results[mode]["stored_bytes_per_answer_byte"] = round(await stored_bytes(stack, response_id) / size, 2)
    done.set()
    results["largest_event_message_bytes"] = await watcher
    await redis.aclose()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=int, nargs="+", default=[1000, 12000, 50000])
    parser.add_argument("--polls", type=int, default=50)
    parser.add_argument("--megabytes", type=float, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    async with running_stack() as stack, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        polling = [await poll_cost(http, stack, n, args.polls) for n in [10, *args.logs]]
        small = await answers(http, stack, 10 * 1024)
        large = await answers(http, stack, int(args.megabytes * 1024 * 1024))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "polling": polling,
        "answer_10_kb": small,
        f"answer_{args.megabytes:g}_mb": large,
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

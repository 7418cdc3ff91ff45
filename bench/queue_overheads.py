"""Three costs on the way to a first token, each against what it replaced, in alternating rounds
of the same run: a Redis command through our pool (app/queue/redis_servers.py, which lends a
connection without polling its socket) against redis-py's stock pool; a job that carries its
response encoded as it is now (app/queue/jobs.py) against `asdict` and the stdlib's JSON; and a
commit's events published as they are now (app/events/channel.py: one PUBLISH) against through a
pipeline, as every commit's were.

    python bench/queue_overheads.py [--commands 5000] [--jobs 2000] [--rounds 4]

Needs Redis as the tests do (REDIS_URL, default redis://127.0.0.1:6379/0). Prints, per round and
as medians, the wall and CPU microseconds of a PUBLISH (to a channel nobody hears), of one job's
encoding and of one commit's publish, and each ratio new/old.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path

from redis.asyncio import ConnectionPool, Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.events import channel
from app.protocol.encoding import WireEvent
from app.protocol.response_object import ResponseRecord
from app.queue.jobs import CarriedResponse, GenerateJob
from app.queue.redis_servers import client

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


async def per_call(call: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """Microseconds of wall and CPU time per call, over n calls one after another."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await call()
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


def a_carried_job() -> GenerateJob:
    """A job as a create of a short question makes it: a record with settings of the usual size."""
    settings: dict[str, object] = {f"option_{i}": i for i in range(24)}
    settings["tools"] = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    settings["requested"] = {"account_id": "acct_bench", "model": "fake", "text": {"format": {"type": "text"}}}
    record = ResponseRecord("resp_" + "a" * 40, "fake", "queued", 1.0, None, None, settings, {}, True, False, True)
    text = "#fake " + "tok " * 64
    message = {
        "id": "msg_" + "b" * 40,
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    return GenerateJob(record.id, "q", CarriedResponse(record, [message]))


def as_it_was(job: GenerateJob) -> bytes:
    """The encoding before: the record copied by `asdict`, then the stdlib's JSON."""
    assert job.carried is not None
    carried = {"record": asdict(job.carried.record), "input": job.carried.input}
    return json.dumps({"t": 1, "f": "generate", "a": [job.response_id, None, carried], "k": {}, "et": 1}).encode()


def a_first_commit() -> dict[str, list[WireEvent]]:
    """A response's first commit as the writer publishes it: its opening events and first delta."""
    record = '{"id":"resp_' + "a" * 40 + '","object":"response","status":"in_progress"' + ',"x":0' * 120 + "}"
    return {
        "resp_" + "a" * 40: [
            WireEvent(0, "response.created", record),
            WireEvent(1, "response.in_progress", record),
            WireEvent(2, "response.output_item.added", '{"type":"response.output_item.added"' + ',"x":0' * 20 + "}"),
            WireEvent(3, "response.content_part.added", '{"type":"response.content_part.added"' + ',"x":0' * 10 + "}"),
            WireEvent(4, "response.output_text.delta", '{"type":"response.output_text.delta","delta":"tok"}'),
        ]
    }


async def through_a_pipeline(redis: Redis, channel_name: str, committed: dict[str, list[WireEvent]]) -> None:
    """How every commit's events were published before."""
    message, _ = channel.encode_message(committed)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.publish(channel_name, message)
        await pipe.execute()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    ours, stock = client(REDIS_URL), Redis(connection_pool=ConnectionPool.from_url(REDIS_URL))
    job = a_carried_job()
    commit = a_first_commit()

    async def encode_now() -> object:
        return job.serialized(1)

    async def encode_before() -> object:
        return as_it_was(job)

    measured: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("publish_ours", "publish_stock", "job_now", "job_before", "events_now", "events_pipelined")
    }
    try:
        for client_ in (ours, stock):
            await client_.ping()
        for _ in range(args.rounds):
            measured["publish_stock"].append(
                await per_call(lambda: stock.publish("bench:nobody", b"x" * 200), args.commands)
            )
            measured["publish_ours"].append(
                await per_call(lambda: ours.publish("bench:nobody", b"x" * 200), args.commands)
            )
            measured["job_before"].append(await per_call(encode_before, args.jobs))
            measured["job_now"].append(await per_call(encode_now, args.jobs))
            measured["events_pipelined"].append(
                await per_call(lambda: through_a_pipeline(ours, "bench:nobody", commit), args.commands)
            )
            measured["events_now"].append(
                await per_call(lambda: channel.publish(ours, "bench:nobody", commit), args.commands)
            )
    finally:
        await ours.aclose()
        await stock.aclose()
    medians = {
        k: {
            "wall_us": round(statistics.median(w for w, _ in v), 1),
            "cpu_us": round(statistics.median(c for _, c in v), 1),
        }
        for k, v in measured.items()
    }
    result = {
        "rounds": {k: [[round(w, 1), round(c, 1)] for w, c in v] for k, v in measured.items()},
        "medians": medians,
        "publish_cpu_ratio_ours_over_stock": round(
            medians["publish_ours"]["cpu_us"] / medians["publish_stock"]["cpu_us"], 2
        ),
        "job_encoding_ratio_now_over_before": round(medians["job_now"]["cpu_us"] / medians["job_before"]["cpu_us"], 3),
        "events_publish_cpu_ratio_now_over_pipelined": round(
            medians["events_now"]["cpu_us"] / medians["events_pipelined"]["cpu_us"], 2
        ),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

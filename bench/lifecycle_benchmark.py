"""The stored lifecycle under load: resuming long streams, many followers, and cancel.

    python bench/lifecycle_benchmark.py

1. Resume: a finished background stream of 10,000 events (its stack committing as soon as the
   last commit returns, so that each chunk is an event of its own) replayed with
   `GET /v1/responses/{id}?stream=true` from the start and from `starting_after=9000`:
   time to the first and to the last byte.
2. Followers: 1,000 concurrent SSE followers over 100 running background responses: events
   delivered per second, errors, and the API process's memory per follower.
3. Cancel: time from sending `POST /cancel` to the model runtime seeing its stream closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import percentiles, rss_mib
from bench.stack import Stack, running_stack


async def create(http: aiohttp.ClientSession, stack: Stack, script: dict[str, Any], **body: Any) -> dict[str, Any]:
    async with http.post(
        f"{stack.api_url}/responses",
        headers=stack.headers,
        json={"model": "fake", "input": "#fake " + json.dumps(script), **body},
    ) as answer:
        answer.raise_for_status()
        if body.get("stream"):
            async for line in answer.content:  # the first event names the response; then let go
                if line.startswith(b"data: "):
                    return dict(json.loads(line[6:])["response"])
        return dict(await answer.json())
    raise RuntimeError("no response.created event")


async def wait_status(http: aiohttp.ClientSession, stack: Stack, response_id: str, statuses: set[str]) -> None:
    while True:
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            if (await answer.json())["status"] in statuses:
                return
        await asyncio.sleep(0.05)


async def replay(
    http: aiohttp.ClientSession, stack: Stack, response_id: str, after: int | None
) -> tuple[float, float, int]:
    params = {"stream": "true", "include_obfuscation": "false"}
    if after is not None:
        params["starting_after"] = str(after)
    started = time.perf_counter()
    first = None
    events = 0
    async with http.get(f"{stack.api_url}/responses/{response_id}", params=params, headers=stack.headers) as answer:
        async for line in answer.content:
            first = first or time.perf_counter()
            events += line.startswith(b"data: ")
    return (first or started) - started, time.perf_counter() - started, events


async def resume_latency(http: aiohttp.ClientSession, stack: Stack, events: int, repeats: int) -> dict[str, Any]:
    # One event per chunk needs chunks slower than a commit (faster ones are coalesced into fewer
    # deltas): the stack of this part commits as soon as the last commit returns (main()).
    words = events - 9  # created, queued, in_progress, item and part added, three closings, completed
    response = await create(http, stack, {"chunks": ["x"] * words, "delay": 0.003}, background=True, stream=True)
    await wait_status(http, stack, response["id"], {"completed"})
    result: dict[str, Any] = {}
    for label, after in (("from_start", None), ("after_9000", 9000)):
        samples = [await replay(http, stack, response["id"], after) for _ in range(repeats)]
        result[label] = {
            "events": samples[0][2],
            "first_byte": percentiles([s[0] for s in samples]),
            "last_byte": percentiles([s[1] for s in samples]),
        }
    return result


async def followers(http: aiohttp.ClientSession, stack: Stack, responses: int, per_response: int) -> dict[str, Any]:
    script = {"text": " ".join(["w"] * 150), "delay": 0.02}
    created = [await create(http, stack, script, background=True, stream=True) for _ in range(responses)]
    rss_before = rss_mib(stack.pids["api"])
    delivered = 0
    errors = 0
    peak_rss = rss_before

    async def follow(response_id: str) -> None:
        nonlocal delivered, errors
        try:
            _, _, events = await replay(http, stack, response_id, None)
            delivered += events
        except Exception:
            errors += 1

    async def sample_memory() -> None:
        nonlocal peak_rss
        while True:
            peak_rss = max(peak_rss, rss_mib(stack.pids["api"]))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample_memory())
    started = time.perf_counter()
    await asyncio.gather(*(follow(r["id"]) for r in created for _ in range(per_response)))
    seconds = time.perf_counter() - started
    sampler.cancel()
    return {
        "followers": responses * per_response,
        "responses": responses,
        "events_delivered": delivered,
        "events_per_s": round(delivered / seconds),
        "errors": errors,
        "seconds": round(seconds, 2),
        "api_rss_mib_before": round(rss_before, 1),
        "api_rss_mib_peak": round(peak_rss, 1),
        "kib_per_follower": round(1024 * (peak_rss - rss_before) / (responses * per_response), 1),
    }


async def cancel_latency(http: aiohttp.ClientSession, stack: Stack, repeats: int) -> dict[str, Any]:
    samples = []
    for _ in range(repeats):
        response = await create(http, stack, {"text": " ".join(["w"] * 500), "delay": 0.02}, background=True)
        await wait_status(http, stack, response["id"], {"in_progress"})
        async with http.get(f"{stack.runtime_url}/_stats") as answer:
            aborted_before = (await answer.json())["streams_aborted"]
        sent = time.time()
        async with http.post(f"{stack.api_url}/responses/{response['id']}/cancel", headers=stack.headers) as answer:
            assert (await answer.json())["status"] == "cancelled"
        while True:
            async with http.get(f"{stack.runtime_url}/_stats") as answer:
                stats = await answer.json()
            if stats["streams_aborted"] > aborted_before:
                samples.append(stats["last_abort_at"] - sent)
                break
            await asyncio.sleep(0.01)
    return {"cancels": repeats, "cancel_to_runtime_closed": percentiles(samples)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--responses", type=int, default=100)
    parser.add_argument("--followers-per-response", type=int, default=10)
    parser.add_argument("--cancels", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        async with running_stack(max_output_tokens=20_000, RESPONSES_EVENT_COMMIT_INTERVAL_SECONDS="0") as stack:
            results = {"resume": await resume_latency(http, stack, args.events, args.repeats)}
        print(json.dumps(results["resume"]), flush=True)
        async with running_stack(max_output_tokens=20_000) as stack:
            await rest(http, stack, args, results)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


async def rest(http: aiohttp.ClientSession, stack: Stack, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Followers and cancels, on a stack with the default commit interval."""
    results["followers"] = await followers(http, stack, args.responses, args.followers_per_response)
    print(json.dumps(results["followers"]), flush=True)
    results["cancel"] = await cancel_latency(http, stack, args.cancels)
    print(json.dumps(results["cancel"]), flush=True)


if __name__ == "__main__":
    asyncio.run(main())

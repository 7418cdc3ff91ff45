"""State at production size: what one request costs when the database is full and a chain is long.

    python bench/scale_benchmark.py [--responses 1000000] [--chain 10000] [--out results.json]

Starts the stack (bench/stack.py: API, worker, fake runtime), fills its database with
bench/scale_data.py, then measures, each beside its baseline in the same run:

1. Context: rebuilding the context of the chain's last turn (its whole history), against a
   one-turn response's: the statement the worker's claim runs, and its rows decoded into items.
2. Create: time to first token of a streamed turn continuing the chain at depth 1, 100, 1,000
   and the full depth, against a turn with no chain.
3. input_items: a page (20 items, the SDKs' default) at the start, middle and end of the chain's
   last turn, in both orders, against the page of a one-turn response.
4. Retrieve: a finished response among all of them, against the same on an empty database's
   size (the chain's first turn, retrieved the same way, is the baseline).
5. Retention: each of its steps over 20,000 due responses, batch after batch: rows per second
   and the longest statement (each is a transaction: the longest any of its locks is held).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.housekeeping import retention
from app.process import gc_tuning
from app.storage import items as items_db
from bench.measure import percentiles
from bench.scale_data import Size, chain_turn, fill
from bench.stack import Stack, running_stack


def beside(measured: dict[str, float], baseline: dict[str, float]) -> dict[str, Any]:
    return {**measured, "p50_ratio_to_baseline": round(measured["p50_ms"] / baseline["p50_ms"], 2)}


async def timed(repeats: int, call: Any) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


async def finished_response(http: aiohttp.ClientSession, stack: Stack, **fields: Any) -> str:
    """A background response run to its end: the template every generated row copies."""
    async with http.post(
        f"{stack.api_url}/responses",
        headers=stack.headers,
        json={"model": "fake", "input": "What is the capital of France?", "background": True, **fields},
    ) as answer:
        response_id = str((await answer.json())["id"])
    while True:
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            if (await answer.json())["status"] == "completed":
                return response_id
        await asyncio.sleep(0.05)


async def context_rebuild(stack: Stack, template: str, depth: int, repeats: int) -> dict[str, Any]:
    """The context as a claim with no copy of the chain reads it: its rows made the items the
    worker translates (the statement and the JSON decoding, with the worker's garbage-collector
    settings)."""
    gc_tuning.tune_after_startup()
    engine = create_async_engine(stack.database_url, isolation_level="AUTOCOMMIT")
    results: dict[str, Any] = {}
    try:
        async with engine.connect() as conn:
            for name, response_id in (("one_turn", template), ("chain", chain_turn(depth - 1))):
                results[name] = {
                    "items": len(await items_db.context_items(conn, response_id)),
                    "decoded": await timed(repeats, lambda r=response_id: items_db.context_items(conn, r)),
                }
    finally:
        await engine.dispose()
    results["chain"]["decoded"] = beside(results["chain"]["decoded"], results["one_turn"]["decoded"])
    return results


async def first_token(http: aiohttp.ClientSession, stack: Stack, previous: str | None) -> float:
    started = time.perf_counter()
    body = {"model": "fake", "input": "and then?", "stream": True, "previous_response_id": previous}
    async with http.post(f"{stack.api_url}/responses", headers=stack.headers, json=body) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if line.startswith(b"event: response.output_text.delta"):
                first = time.perf_counter() - started
                async for _ in answer.content:  # read to the end: the next create finds the worker free
                    pass
                return first
    raise RuntimeError("no output_text.delta")


async def create_at_depths(
    http: aiohttp.ClientSession, stack: Stack, depths: list[int], repeats: int
) -> dict[str, Any]:
    async def ttft(previous: str | None) -> dict[str, float]:
        return percentiles([await first_token(http, stack, previous) for _ in range(repeats)])

    baseline = await ttft(None)
    return {"no_chain": baseline, **{str(d): beside(await ttft(chain_turn(d - 1)), baseline) for d in depths}}


async def page_of(http: aiohttp.ClientSession, stack: Stack, response_id: str, **params: str) -> list[str]:
    url = f"{stack.api_url}/responses/{response_id}/input_items"
    async with http.get(url, headers=stack.headers, params={"limit": "20", **params}) as answer:
        answer.raise_for_status()
        return [item["id"] for item in (await answer.json())["data"]]


async def input_item_pages(
    http: aiohttp.ClientSession, stack: Stack, template: str, depth: int, repeats: int
) -> dict[str, Any]:
    last = chain_turn(depth - 1)
    baseline = await timed(repeats, lambda: page_of(http, stack, template))
    # Cursors: the chain's first item, its middle one, and one a page before its end.
    first = (await page_of(http, stack, last, order="asc"))[0]
    newest = await page_of(http, stack, last, order="desc")
    middle = chain_turn(depth // 2)
    middle_item = (await page_of(http, stack, middle, order="desc"))[0]
    results: dict[str, Any] = {"one_turn": baseline}
    for place, cursor in (("start", first), ("middle", middle_item), ("end", newest[-1])):
        for order in ("asc", "desc"):
            results[f"{place}_{order}"] = beside(
                await timed(repeats, lambda c=cursor, o=order: page_of(http, stack, last, order=o, after=c)), baseline
            )
    return results


async def retrieves(http: aiohttp.ClientSession, stack: Stack, size: Size, repeats: int) -> dict[str, Any]:
    async def retrieve(response_id: str) -> None:
        async with http.get(f"{stack.api_url}/responses/{response_id}", headers=stack.headers) as answer:
            answer.raise_for_status()

    # The template's account holds every `accounts`-th generated response.
    ours = [f"resp_scale_{n:08d}" for n in range(size.accounts, size.responses + 1, size.accounts)]
    baseline = await timed(repeats, lambda: retrieve(chain_turn(0)))
    among_all = await timed(repeats, lambda: retrieve(random.choice(ours)))
    return {"responses": size.responses + size.chain, "one": baseline, "random": beside(among_all, baseline)}


async def retention_pass(stack: Stack, size: Size, due: int) -> dict[str, Any]:
    """Each retention step run batch after batch over the `due` oldest generated responses (one a
    second: each window set to reach just those): rows removed per second, and the longest
    statement (every statement is its own transaction, so that is the longest any lock is held)."""
    window = timedelta(seconds=size.responses - due)
    policy = retention.RetentionPolicy(window, window, window, window)
    engine = create_async_engine(stack.database_url)
    results: dict[str, Any] = {}
    try:
        for step in sorted(retention.STEPS, key=lambda s: not s.purge_log):  # logs first: deletes take them too
            durations, removed = [], 0
            while True:
                started = time.perf_counter()
                batch = await retention.run_step(engine, policy, step)
                durations.append(time.perf_counter() - started)
                removed += batch
                if batch < retention.BATCH:
                    break
            results[step.name] = {
                "removed": removed,
                "per_second": round(removed / sum(durations)),
                "longest_statement_ms": round(1000 * max(durations), 1),
            }
    finally:
        await engine.dispose()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=Size.responses)
    parser.add_argument("--chain", type=int, default=Size.chain)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    size = Size(responses=args.responses, chain=args.chain)
    depths = [d for d in (1, 100, 1000, 10_000) if d < size.chain] + [size.chain]
    results: dict[str, Any] = {"size": {"responses": size.responses, "chain": size.chain}}
    # The stack's worker applies no retention of its own: it would purge the generated logs midway.
    async with running_stack(RESPONSES_RETENTION_INTERVAL_SECONDS="1e9") as stack, aiohttp.ClientSession() as http:
        template = await finished_response(http, stack)
        results["fill_seconds"] = await fill(stack.database_url, template, size)
        print(json.dumps(results), flush=True)
        for name, measure in (
            ("context", context_rebuild(stack, template, size.chain, args.repeats)),
            ("create_ttft", create_at_depths(http, stack, depths, max(5, args.repeats // 5))),
            ("input_items", input_item_pages(http, stack, template, size.chain, args.repeats)),
            ("retrieve", retrieves(http, stack, size, args.repeats)),
            ("retention", retention_pass(stack, size, min(20_000, size.responses // 2))),
        ):
            results[name] = await measure
            print(json.dumps({name: results[name]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

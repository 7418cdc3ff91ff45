"""Conversations and chains at length: what a long conversation's or chain's turn, and a page of
a long conversation, cost.

    python bench/conversation_benchmark.py [--turns 1000] [--items 10000] [--repeats 50] [--out results.json]
    python bench/conversation_benchmark.py --cache-mb 0    # the worker without its copies of conversations

Starts the stack (bench/stack.py: API, worker, fake runtime), then measures, each beside its
baseline in the same run:

1. Turn: time to first token of a streamed turn in a new conversation, and of turn `--turns` of
   one that `--turns` - 1 turns built through the API, taken in turns; each beside the same chat
   request (the one the worker sent, from the fake runtime's log) sent straight to the runtime. What
   the conversation itself costs is the overhead (ours - direct) at turn N minus that at turn 1:
   the direct request already pays for sending the longer prompt. The database is vacuumed after
   the turns are built, as autovacuum would have done over the hours such a conversation takes.
2. Chain turn: the same for a chain of `previous_response_id`s: turn `--turns` continues one of
   `--turns` - 1 turns (each measured turn continues the same last one), beside a first turn.
3. Pages: a page of 20 items of a conversation of `--items` items (added 20 at a time), its cursor
   at the start, middle and end, in both orders, against a page of a two-item conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import percentiles
from bench.stack import Stack, running_stack
from bench.stream_benchmark import stream_one

TURN = {"model": "fake", "input": "tok tok", "stream": True, "stream_options": {"include_obfuscation": False}}
OURS_DELTA = b"response.output_text.delta"
DIRECT_DELTA = b'"content"'
JSON = {"Content-Type": "application/json"}


async def new_conversation(http: aiohttp.ClientSession, stack: Stack, items: list[Any] | None = None) -> str:
    async with http.post(
        f"{stack.api_url}/conversations", headers=stack.headers, json={"items": items or []}
    ) as answer:
        answer.raise_for_status()
        return str((await answer.json())["id"])


async def last_runtime_request(http: aiohttp.ClientSession, stack: Stack) -> dict[str, Any]:
    async with http.get(f"{stack.runtime_url}/_requests") as answer:
        received: list[dict[str, Any]] = await answer.json()
    return received[-1]


async def forget_runtime_requests(http: aiohttp.ClientSession, stack: Stack) -> None:
    """The fake runtime keeps every body it received: a long conversation's add up."""
    async with http.delete(f"{stack.runtime_url}/_requests") as answer:
        answer.raise_for_status()


async def turn_beside_direct(
    http: aiohttp.ClientSession, stack: Stack, conversation: str | None = None, previous: str | None = None
) -> tuple[float, float]:
    """One streamed turn in the conversation (or continuing `previous`), then the request it made
    sent straight to the runtime: both times to first token."""
    await forget_runtime_requests(http, stack)
    body = {**TURN, "conversation": conversation} if conversation else {**TURN, "previous_response_id": previous}
    ours = (await stream_one(http, f"{stack.api_url}/responses", body, stack.headers, OURS_DELTA)).ttft
    sent = orjson.dumps(await last_runtime_request(http, stack))  # encoded beforehand: only sending it is timed
    started = time.perf_counter()
    async with http.post(f"{stack.runtime_url}/v1/chat/completions", data=sent, headers=JSON) as answer:
        async for line in answer.content:
            if DIRECT_DELTA in line and b"tok" in line:
                direct = time.perf_counter() - started
                break
        else:
            raise RuntimeError("the runtime streamed no token")
    return ours, direct


def overheads(samples: list[tuple[float, float]]) -> dict[str, Any]:
    ours, direct = [s[0] for s in samples], [s[1] for s in samples]
    return {
        "ours": percentiles(ours),
        "direct": percentiles(direct),
        "overhead_p50_ms": round(1000 * statistics.median(o - d for o, d in samples), 2),
    }


async def build_turns(http: aiohttp.ClientSession, stack: Stack, conversation: str, turns: int) -> None:
    for turn in range(turns):
        async with http.post(
            f"{stack.api_url}/responses",
            headers=stack.headers,
            json={"model": "fake", "input": f"turn {turn}", "conversation": conversation},
        ) as answer:
            answer.raise_for_status()
        if turn % 100 == 99:
            await forget_runtime_requests(http, stack)
            print(f"  {turn + 1} turns", file=sys.stderr)


async def settle(stack: Stack) -> None:
    """What autovacuum does within a minute of the turns just built, done now: a conversation of
    1,000 turns is hours of them, not the seconds built here, and the churn of those seconds
    would otherwise be vacuumed in the middle of the measurement."""
    conn = await asyncpg.connect(stack.database_url.replace("+asyncpg", ""))
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


async def measure_turns(http: aiohttp.ClientSession, stack: Stack, turns: int, repeats: int) -> dict[str, Any]:
    long = await new_conversation(http, stack)
    await build_turns(http, stack, long, turns - 1)
    await settle(stack)
    first, deep = [], []
    for _ in range(repeats):  # interleaved: the machine's drift falls on both alike
        first.append(await turn_beside_direct(http, stack, await new_conversation(http, stack)))
        deep.append(await turn_beside_direct(http, stack, long))
    at_first, at_depth = overheads(first), overheads(deep)
    return {
        "turn_1": at_first,
        f"turn_{turns}": at_depth,
        "overhead_growth_p50_ms": round(at_depth["overhead_p50_ms"] - at_first["overhead_p50_ms"], 2),
    }


async def build_chain(http: aiohttp.ClientSession, stack: Stack, turns: int) -> str:
    """A chain of `turns` responses, each continuing the one before; the last one's id."""
    previous = None
    for turn in range(turns):
        body = {"model": "fake", "input": f"turn {turn}", "previous_response_id": previous}
        async with http.post(f"{stack.api_url}/responses", headers=stack.headers, json=body) as answer:
            answer.raise_for_status()
            previous = str((await answer.json())["id"])
        if turn % 100 == 99:
            await forget_runtime_requests(http, stack)
            print(f"  {turn + 1} chain turns", file=sys.stderr)
    assert previous is not None
    return previous


async def measure_chain(http: aiohttp.ClientSession, stack: Stack, turns: int, repeats: int) -> dict[str, Any]:
    last = await build_chain(http, stack, turns - 1)
    await settle(stack)
    first, deep = [], []
    for _ in range(repeats):
        first.append(await turn_beside_direct(http, stack, previous=None))
        deep.append(await turn_beside_direct(http, stack, previous=last))
    at_first, at_depth = overheads(first), overheads(deep)
    return {
        "turn_1": at_first,
        f"turn_{turns}": at_depth,
        "overhead_growth_p50_ms": round(at_depth["overhead_p50_ms"] - at_first["overhead_p50_ms"], 2),
    }


async def page_ids(http: aiohttp.ClientSession, stack: Stack, conversation: str) -> list[str]:
    """Every item id of the conversation, oldest first."""
    ids: list[str] = []
    params: dict[str, str] = {"order": "asc", "limit": "100"}
    while True:
        async with http.get(
            f"{stack.api_url}/conversations/{conversation}/items", headers=stack.headers, params=params
        ) as answer:
            page = await answer.json()
        ids += [item["id"] for item in page["data"]]
        if not page["has_more"]:
            return ids
        params["after"] = page["last_id"]


async def timed_page(
    http: aiohttp.ClientSession, stack: Stack, conversation: str, params: dict[str, str], repeats: int
) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        async with http.get(
            f"{stack.api_url}/conversations/{conversation}/items", headers=stack.headers, params=params
        ) as answer:
            page = await answer.json()
        samples.append(time.perf_counter() - started)
        assert page["data"], page
    return percentiles(samples)


async def measure_pages(http: aiohttp.ClientSession, stack: Stack, size: int, repeats: int) -> dict[str, Any]:
    message = {"type": "message", "role": "user", "content": "an item of a long conversation"}
    small = await new_conversation(http, stack, [message, message])
    large = await new_conversation(http, stack)
    for _ in range(size // 20):
        async with http.post(
            f"{stack.api_url}/conversations/{large}/items", headers=stack.headers, json={"items": [message] * 20}
        ) as answer:
            answer.raise_for_status()
    ids = await page_ids(http, stack, large)
    assert len(ids) == size, len(ids)
    results: dict[str, Any] = {"two_items": await timed_page(http, stack, small, {"limit": "20"}, repeats)}
    for order in ("asc", "desc"):
        listed = ids if order == "asc" else ids[::-1]
        for where, index in (("start", 0), ("middle", size // 2), ("end", size - 21)):
            params = {"order": order, "limit": "20", "after": listed[index]}
            results[f"{order}_{where}"] = await timed_page(http, stack, large, params, repeats)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=50, help="samples of each turn measurement")
    parser.add_argument("--page-repeats", type=int, default=500, help="samples of each page")
    parser.add_argument("--cache-mb", help="the worker's RESPONSES_CONVERSATION_CACHE_MB (default: its default)")
    parser.add_argument("--chain-only", action="store_true", help="only the chain's turns")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cache = {} if args.cache_mb is None else {"RESPONSES_CONVERSATION_CACHE_MB": args.cache_mb}
    async with running_stack(**cache) as stack, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
        for _ in range(20):  # warm up: pools at size, statements prepared
            await turn_beside_direct(http, stack, await new_conversation(http, stack))
        results = {"chain": await measure_chain(http, stack, args.turns, args.repeats)}
        if not args.chain_only:
            results["turns"] = await measure_turns(http, stack, args.turns, args.repeats)
            results["pages"] = await measure_pages(http, stack, args.items, args.page_repeats)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())

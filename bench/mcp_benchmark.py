"""What a step of an MCP tool loop costs the server, in the same run as its baselines.

    python bench/mcp_benchmark.py [--rounds 3] [--loops 20] [--calls 5] [--concurrent 32]

One stack (bench/stack.py: API, worker, the fake runtime) and one MCP server
(tests/mcp_server.py, in this process) whose `add` tool answers at once.

Step gap: `--loops` responses, one after another, each a loop of `--calls` MCP calls and an
answer. For each call, the time from the MCP server's answer (its tool returning) to the fake
runtime receiving the next inference request: what the server adds between the MCP result and
the next inference (reading the result, committing the call's end, building the request).
Baseline, in the same run: a bare loop in this process doing the same two things with nothing
else (the `mcp` SDK's call, then the chat request to the fake runtime), the least any loop pays.

Concurrent loops: `--concurrent` background responses at once, each a loop of `--calls` calls,
followed to their end; against the same loops run by the clients, as an agent with its own MCP
client runs them: each call a function call the client makes to the same MCP server (the `mcp`
SDK, one session per loop) and answers with `function_call_output` and `previous_response_id`.
Reported: wall time of all of them, and the ratio server-run / client-run.
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
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import Stack, running_stack
from tests.mcp_server import McpTestServer


def _loop_script(calls: int) -> str:
    script: dict[str, Any] = {"text": "done"}
    for n in reversed(range(calls)):
        script = {"tool_calls": [{"name": "add", "arguments": json.dumps({"a": n, "b": 1})}], "then": script}
    return "#fake " + json.dumps(script)


def _mcp_tool(server: McpTestServer) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "tools", "server_url": server.url, "require_approval": "never"}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def _arrivals(stack: Stack) -> list[float]:
    async with httpx.AsyncClient() as client:
        stats = (await client.get(f"{stack.runtime_url}/_stats")).json()
    return list(stats["arrivals"])


async def _reset(stack: Stack, server: McpTestServer) -> None:
    async with httpx.AsyncClient() as client:
        await client.delete(f"{stack.runtime_url}/_requests")
    server.finished_at.clear()


def _gaps(finished: list[float], arrivals: list[float]) -> list[float]:
    """Per MCP answer, the milliseconds to the first inference request after it."""
    gaps = []
    for at in finished:
        later = [arrival for arrival in arrivals if arrival >= at]
        if later:
            gaps.append((min(later) - at) * 1000)
    return gaps


async def server_step_gaps(stack: Stack, server: McpTestServer, loops: int, calls: int) -> list[float]:
    await _reset(stack, server)
    body = {"model": "fake", "input": _loop_script(calls), "tools": [_mcp_tool(server)]}
    async with aiohttp.ClientSession(headers=stack.headers) as session:
        for _ in range(loops):
            async with session.post(f"{stack.api_url}/responses", json=body) as answer:
                done = await answer.json()
                assert done.get("status") == "completed", done
    return _gaps(list(server.finished_at), await _arrivals(stack))


async def bare_step_gaps(stack: Stack, server: McpTestServer, loops: int, calls: int) -> list[float]:
    """The same steps with nothing but the MCP call and the chat request."""
    from mcp import Client

    await _reset(stack, server)
    chat = {"model": "fake", "messages": [{"role": "user", "content": "go"}], "stream": True}
    async with aiohttp.ClientSession() as session, Client(server.url, cache=None) as mcp:
        for _ in range(loops * calls):
            await mcp.call_tool("add", {"a": 1, "b": 1})
            async with session.post(f"{stack.runtime_url}/v1/chat/completions", json=chat) as answer:
                await answer.read()
    return _gaps(list(server.finished_at), await _arrivals(stack))


async def _follow(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url, json={**body, "background": True, "stream": True}) as answer:
        final: dict[str, Any] = {}
        async for line in answer.content:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                    final = event["response"]
        return final


async def server_loops(stack: Stack, server: McpTestServer, concurrent: int, calls: int) -> float:
    body = {"model": "fake", "input": _loop_script(calls), "tools": [_mcp_tool(server)]}
    url = f"{stack.api_url}/responses"
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers=stack.headers) as session:
        ended = await asyncio.gather(*(_follow(session, url, body) for _ in range(concurrent)))
    assert all(response["status"] == "completed" for response in ended), ended
    return time.perf_counter() - started


FUNCTION = [{"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}]


async def _client_loop(session: aiohttp.ClientSession, url: str, server: McpTestServer, calls: int) -> None:
    from mcp import Client

    body: dict[str, Any] = {"model": "fake", "input": _loop_script(calls), "tools": FUNCTION}
    async with Client(server.url, cache=None) as mcp:
        for _ in range(calls + 1):
            response = await _follow(session, url, body)
            call_items = [item for item in response["output"] if item["type"] == "function_call"]
            if not call_items:
                return
            result = await mcp.call_tool("add", json.loads(call_items[0]["arguments"]))
            text = "".join(getattr(block, "text", "") for block in result.content)
            output = {"type": "function_call_output", "call_id": call_items[0]["call_id"], "output": text}
            body = {"model": "fake", "input": [output], "tools": FUNCTION, "previous_response_id": response["id"]}


async def client_loops(stack: Stack, server: McpTestServer, concurrent: int, calls: int) -> float:
    url = f"{stack.api_url}/responses"
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers=stack.headers) as session:
        await asyncio.gather(*(_client_loop(session, url, server, calls) for _ in range(concurrent)))
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=32)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    server = McpTestServer().start()
    figures: dict[str, list[float]] = {"server": [], "bare": [], "server_loops_s": [], "client_loops_s": []}
    try:
        async with running_stack(RESPONSES_MCP_ALLOW="127.0.0.1/32") as stack:
            await server_step_gaps(stack, server, 2, args.calls)  # warm-up
            for _ in range(args.rounds):  # the rounds alternate the ways
                figures["server"] += await server_step_gaps(stack, server, args.loops, args.calls)
                figures["bare"] += await bare_step_gaps(stack, server, args.loops, args.calls)
                figures["server_loops_s"].append(await server_loops(stack, server, args.concurrent, args.calls))
                figures["client_loops_s"].append(await client_loops(stack, server, args.concurrent, args.calls))
    finally:
        server.stop()
    result = {
        "step_gap_ms": {
            way: {"p50": round(_percentile(figures[way], 0.5), 2), "p99": round(_percentile(figures[way], 0.99), 2)}
            for way in ("server", "bare")
        },
        "step_gap_ratio_p50": round(_percentile(figures["server"], 0.5) / _percentile(figures["bare"], 0.5), 2),
        "concurrent_loops_s": {
            "server_run": round(statistics.median(figures["server_loops_s"]), 2),
            "client_run": round(statistics.median(figures["client_loops_s"]), 2),
        },
        "concurrent_ratio": round(
            statistics.median(figures["server_loops_s"]) / statistics.median(figures["client_loops_s"]), 3
        ),
        "args": vars(args) | {"json": None},
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

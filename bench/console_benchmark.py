"""The operator's console at production size: each page's time with 1,000,000 stored responses.

    python bench/console_benchmark.py --out docs/bench-results/console.json   # about 3 minutes
    python bench/console_benchmark.py --responses 100000 --repeats 20          # a quicker look

Fills the stack's database as bench/scale_benchmark.py does (bench/scale_data.py: finished
responses over 1,000 accounts, one in ten with its event log, one chain of 10,000 turns), logs in
with an operator key, then asks each page `--repeats` times in turn and reports its p50 and p99
(from the request's start to its body's end, over loopback: an upper bound of the server's own
time), beside the login form's, a page that reads nothing, as the baseline of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.measure import percentiles  # noqa: E402
from bench.scale_benchmark import finished_response  # noqa: E402
from bench.scale_data import Size, chain_turn, fill  # noqa: E402
from bench.stack import Stack, running_stack  # noqa: E402


def pages(size: Size, template: str) -> dict[str, str]:
    """Each page asked, by what it shows."""
    oldest = "resp_scale_" + "1".zfill(8)
    return {
        "login form (baseline)": "/console/login",
        "responses, newest": "/console/responses",
        "responses, an account's": "/console/responses?account=scale-7",
        "responses, failed (none)": "/console/responses?status=failed",
        "responses, cancelled (none)": "/console/responses?status=cancelled",
        "responses, completed": "/console/responses?status=completed",
        "responses, a model's": "/console/responses?model=fake",
        "responses, a model with none": "/console/responses?model=no-such-model",
        "responses, metadata on every row": "/console/responses?metadata=topic%3Dscale",
        "responses, metadata on none": "/console/responses?metadata=run%3Dnowhere",
        "responses, an id prefix": f"/console/responses?id={oldest[:-2]}",
        "responses, a past hour": "/console/responses?from=2000-01-01T00%3A00&to=2000-01-01T01%3A00",
        "responses, page 100": "",  # (its cursor is found by walking the pages first)
        "a response with its log": f"/console/responses/{template}",
        "a response in a long chain": f"/console/responses/{chain_turn(size.chain // 2)}",
        "accounts": "/console/accounts",
        "an account": "/console/accounts/acct_scale_7",
        "system": "/console/system",
    }


async def log_in(http: aiohttp.ClientSession, stack: Stack) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "app.cli", "operators", "create", "bench"],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
    )
    key = made.stdout.strip().splitlines()[-1]
    async with http.post(f"{origin(stack)}/console/login", data={"key": key}, allow_redirects=False) as answer:
        assert answer.status == 303, await answer.text()


def origin(stack: Stack) -> str:
    return stack.api_url.removesuffix("/v1")


async def deep_page(http: aiohttp.ClientSession, stack: Stack, pages_in: int) -> str:
    """The list's path `pages_in` pages from its start, by the "older" links."""
    path = "/console/responses"
    for _ in range(pages_in):
        async with http.get(origin(stack) + path) as answer:
            text = await answer.text()
        start = text.index('class="next" href="') + len('class="next" href="')
        path = text[start : text.index('"', start)].replace("&amp;", "&")
    return path


async def timed(http: aiohttp.ClientSession, url: str, repeats: int) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        async with http.get(url, allow_redirects=False) as answer:
            await answer.read()
            assert answer.status == 200, (url, answer.status)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=Size.responses)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    size = Size(responses=args.responses)
    results: dict[str, Any] = {"size": {"responses": size.responses, "chain": size.chain}}
    jar = aiohttp.CookieJar(unsafe=True)  # (the console's cookie, on 127.0.0.1)
    # The stack's worker applies no retention of its own: it would purge the generated logs midway.
    stack_running = running_stack(RESPONSES_CONSOLE="true", RESPONSES_RETENTION_INTERVAL_SECONDS="1e9")
    async with stack_running as stack, aiohttp.ClientSession(cookie_jar=jar) as http:
        template = await finished_response(http, stack, metadata={"topic": "scale"})  # (every row's)
        results["fill_seconds"] = await fill(stack.database_url, template, size)
        await log_in(http, stack)
        asked = pages(size, template)
        asked["responses, page 100"] = await deep_page(http, stack, 100)
        measured = {}
        for name, path in asked.items():
            measured[name] = await timed(http, origin(stack) + path, args.repeats)
            print(json.dumps({name: measured[name]}), flush=True)
        baseline = measured["login form (baseline)"]["p50_ms"]
        results["pages"] = {
            name: {**figures, "p50_ratio_to_baseline": round(figures["p50_ms"] / baseline, 2)}
            for name, figures in measured.items()
        }
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())

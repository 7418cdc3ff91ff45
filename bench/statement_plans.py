"""What planning costs the token path's statements: a response's insert, its claim and a read of
its event log, timed as Postgres plans them by default (afresh at each run) and with one plan
kept for any arrays (`plan_cache_mode = force_generic_plan`, what the held connections use:
app/storage/engine.py), in alternating rounds on one connection.

    python bench/statement_plans.py [--runs 300] [--rounds 4]

Starts the stack (bench/stack.py) to have a migrated database with an account and a few answered
responses, then sends the statements through asyncpg as the driver does (app/storage/driver.py).
Prints each statement's p50 in microseconds under each mode, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.storage.events import _LOGS_AFTER
from app.storage.responses import _CLAIM, _INSERT_WITH_INPUT
from bench.stack import running_stack

MODES = ("auto", "force_generic_plan")


def insert_arguments(account_id: str) -> tuple[str, list[object]]:
    """A foreground response of one input message, as a create stores it."""
    response_id = f"resp_{uuid.uuid4().hex}"
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
    one: dict[str, object] = {"ids": response_id, "account_ids": account_id, "models": "fake", "statuses": "queued"}
    one |= {"backgrounds": False, "streams": True, "stores": True, "instructions": None, "metadata": "{}"}
    one |= {"settings": json.dumps({"temperature": 1.0, "tools": []}), "previous_response_ids": None}
    one |= {"context_parent_ids": None, "chain_depths": 0, "created_epochs": time.time(), "conversation_ids": None}
    one |= {"item_ids": f"msg_{uuid.uuid4().hex}", "item_responses": response_id, "positions": 0}
    one |= {"types": "message", "payloads": json.dumps(message)}
    values: dict[str, object] = {name: [value] for name, value in one.items()}
    values |= {name: [] for name in _INSERT_WITH_INPUT._names if name.startswith("event_")}
    values["flush"] = False
    return response_id, [values[name] for name in _INSERT_WITH_INPUT._names]


async def timed_round(conn: asyncpg.Connection, account_id: str, answered: list[str], runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"insert": [], "claim": [], "log_read": []}
    claim_names = _CLAIM._names
    for run in range(runs):
        response_id, arguments = insert_arguments(account_id)
        started = time.perf_counter()
        await conn.fetch(_INSERT_WITH_INPUT._sql, *arguments)
        times["insert"].append(time.perf_counter() - started)
        claim = {"response_ids": [response_id], "worker_id": "bench", "lease_seconds": 30.0}
        started = time.perf_counter()
        await conn.fetch(_CLAIM._sql, *[claim[name] for name in claim_names])
        times["claim"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await conn.fetch(_LOGS_AFTER._sql, [answered[run % len(answered)]], [-1], 100)
        times["log_read"].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="of each statement in a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each mode, alternating")
    args = parser.parse_args()
    body = {"model": "fake", "input": '#fake {"text": "a short answer"}', "stream": False}
    async with running_stack() as stack, aiohttp.ClientSession() as client:
        answered = []
        for _ in range(20):
            async with client.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
                answered.append((await answer.json())["id"])
        parts = urlsplit(stack.database_url.replace("+asyncpg", ""))
        conn = await asyncpg.connect(f"postgresql://{parts.netloc}{parts.path}")
        try:
            account_id = await conn.fetchval("SELECT account_id FROM responses WHERE id = $1", answered[0])
            results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
            for _ in range(args.rounds):
                for mode in MODES:
                    await conn.execute(f"SET plan_cache_mode = {mode}")
                    await conn.execute("DEALLOCATE ALL")
                    conn._stmt_cache.clear()  # (asyncpg's own cache of what it prepared)
                    results[mode].append(await timed_round(conn, account_id, answered, args.runs))
        finally:
            await conn.close()
    p50 = {
        mode: {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
        for mode, rounds in results.items()
    }
    report = {
        "p50_us": {mode: {name: round(value) for name, value in by_name.items()} for mode, by_name in p50.items()},
        "generic_over_default": {name: round(p50[MODES[1]][name] / p50[MODES[0]][name], 2) for name in p50[MODES[0]]},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

"""What planning costs the token path's statements: a response's insert, its claim, a read of its
event log, and a foreground response's insert by its worker (claimed as it is stored), timed as
Postgres plans them by default (afresh at each run) and with one plan kept for any arrays
(`plan_cache_mode = force_generic_plan`, what the held connections use: app/storage/engine.py),
in alternating rounds, each on a connection of its own mode.

    python bench/statement_plans.py [--runs 300] [--rounds 4]

Starts the stack (bench/stack.py) to have a migrated database with an account and a few answered
responses, then runs the statements as the API and the worker do (`responses_db.insert_responses`,
`responses_db.claim`, `events_db.logs_after`, `responses_db.insert_claimed`, in autocommit).
Prints each one's p50 in microseconds under each mode, and their ratio; and, with the held
connections' plans, the worker's insert of a foreground response against its API's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.protocol.ids import new_id
from app.protocol.response_object import ResponseRecord
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from bench.stack import running_stack

MODES = ("auto", "force_generic_plan")
MESSAGE = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}


def foreground_response(account_id: str) -> responses_db.NewResponse:
    """A streamed response of one input message that continues nothing, as a create stores it."""
    record = ResponseRecord(
        id=new_id("resp"),
        model="fake",
        status="queued",
        created_at=time.time(),
        instructions=None,
        previous_response_id=None,
        settings={"temperature": 1.0, "tools": []},
        metadata={},
        store=True,
        background=False,
        stream=True,
    )
    return responses_db.NewResponse(
        record, account_id, responses_db.ChainLink(None, 0), items_db.with_new_ids([MESSAGE])
    )


async def timed_round(conn: AsyncConnection, account_id: str, answered: list[str], runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"insert": [], "claim": [], "log_read": [], "worker_insert": []}
    for run in range(runs):
        new = foreground_response(account_id)
        started = time.perf_counter()
        await responses_db.insert_responses(conn, [new])
        times["insert"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await responses_db.claim(conn, new.record.id, "bench", 30.0)
        times["claim"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await events_db.logs_after(conn, [(answered[run % len(answered)], -1)], 100)
        times["log_read"].append(time.perf_counter() - started)
        new = foreground_response(account_id)
        started = time.perf_counter()
        await responses_db.insert_claimed(conn, [new], responses_db.Claimant("bench", 30.0))
        times["worker_insert"].append(time.perf_counter() - started)
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
        engines = {
            mode: create_async_engine(stack.database_url, connect_args={"server_settings": {"plan_cache_mode": mode}})
            for mode in MODES
        }
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        try:
            async with engines[MODES[0]].connect() as conn:
                find = text("SELECT account_id FROM responses WHERE id = :id")
                account_id = str(await conn.scalar(find, {"id": answered[0]}))
            for _ in range(args.rounds):
                for mode in MODES:
                    async with engines[mode].connect() as conn:  # (a fresh one: no plan kept from before)
                        await conn.execution_options(isolation_level="AUTOCOMMIT")
                        results[mode].append(await timed_round(conn, account_id, answered, args.runs))
                    await engines[mode].dispose()
        finally:
            for engine in engines.values():
                await engine.dispose()
    p50 = {
        mode: {name: statistics.median(one[name] for one in rounds) for name in rounds[0]}
        for mode, rounds in results.items()
    }
    report = {
        "p50_us": {mode: {name: round(value) for name, value in by_name.items()} for mode, by_name in p50.items()},
        "generic_over_default": {name: round(p50[MODES[1]][name] / p50[MODES[0]][name], 2) for name in p50[MODES[0]]},
        "worker_insert_over_insert": round(p50[MODES[1]]["worker_insert"] / p50[MODES[1]]["insert"], 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

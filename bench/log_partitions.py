"""What the event log's day partitions cost the token path's commits: a response's first output's
commit, a later delta's and its end's, as the worker's writer runs them, and a read of its whole
log while it runs and once it ended (`events_db.events_after`, as a resume reads it), and while
it runs as an API process reads it for its followers (`events_db.logs_after`), timed in
alternating rounds on the partitions a fresh database has and with `--days` more, as a retention
window keeps (one partition a day: app/housekeeping/log_partitions.py).

    python bench/log_partitions.py [--days 90] [--runs 200] [--rounds 4]

Starts the stack (bench/stack.py) for a migrated database and one streamed answer, whose events
are the ones committed; each run stores a new response as its worker does
(`responses_db.insert_claimed`) and commits its events with `events_db.append_many` on a connection
with the held ones' settings (app/storage/engine.py). The partitions of a "many"
round are made before it and dropped after it. Prints each statement's p50 in microseconds with
few and with many partitions, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.events.log_reader import PAGE
from app.housekeeping import log_partitions
from app.protocol.ids import new_id
from app.storage import events as events_db
from app.storage import responses as responses_db
from app.storage.engine import server_settings
from bench.stack import running_stack
from bench.statement_plans import foreground_response

Event = dict[str, Any]
EPOCH = datetime.date(1970, 1, 1)


def past_days(days: int) -> range:
    """The `days` days before today (UTC, as the partitions' days are), whose partitions a retention
    window keeps."""
    today = (datetime.datetime.now(datetime.UTC).date() - EPOCH).days
    return range(today - days, today)


async def add_partitions(conn: AsyncConnection, days: int) -> None:
    for day in past_days(days):
        await log_partitions.create(conn, day)


async def drop_partitions(conn: AsyncConnection, days: int) -> None:
    for day in past_days(days):
        await conn.execute(text(f"DROP TABLE {log_partitions.partition_name(day)}"))


def renamed(events: list[Event], names: dict[str, str]) -> list[Event]:
    """The answered response's events, made another's: its ids (the response's, its items') renamed."""
    as_json = json.dumps(events)
    for old, new in names.items():
        as_json = as_json.replace(old, new)
    as_events: list[Event] = json.loads(as_json)
    return as_events


async def timed_round(
    conn: AsyncConnection, account_id: str, stream: list[Event], answered_id: str, runs: int
) -> dict[str, float]:
    first_delta = next(i for i, event in enumerate(stream) if event["type"] == "response.output_text.delta")
    opening, later, closing = stream[: first_delta + 1], stream[first_delta + 1], stream[-4:]
    output = stream[-1]["response"]["output"]
    item_ids = [item["id"] for item in output]
    times: dict[str, list[float]] = {name: [] for name in ("first_commit", "later_commit", "ending_commit")}
    times |= {"running_read": [], "followers_read": [], "ended_read": []}
    for _ in range(runs):
        new = foreground_response(account_id)
        response_id = new.record.id
        names = {answered_id: response_id} | {old: new_id("msg") for old in item_ids}
        await responses_db.insert_claimed(conn, [new], responses_db.Claimant("bench", 30.0))
        started = time.perf_counter()
        committed = await events_db.append_many(conn, {response_id: renamed(opening, names)})
        times["first_commit"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await events_db.append_many(conn, {response_id: renamed([later], names)})
        times["later_commit"].append(time.perf_counter() - started)
        started = time.perf_counter()
        running = await events_db.events_after(conn, response_id, -1, None)
        times["running_read"].append(time.perf_counter() - started)
        started = time.perf_counter()
        followed = await events_db.logs_after(conn, [(response_id, -1)], PAGE)
        times["followers_read"].append(time.perf_counter() - started)
        outcome = responses_db.Outcome("completed", renamed(output, names), time.time())
        started = time.perf_counter()
        ended = await events_db.append_many(conn, {response_id: renamed(closing, names)}, {response_id: outcome})
        times["ending_commit"].append(time.perf_counter() - started)
        started = time.perf_counter()
        whole = await events_db.events_after(conn, response_id, -1, None)
        times["ended_read"].append(time.perf_counter() - started)
        read_alike = followed[response_id, -1].events == running
        if not committed or not ended or not read_alike or len(whole) != len(running) + len(closing):
            raise RuntimeError("a commit stored nothing, or a read missed what it stored")
    return {name: statistics.median(values) * 1e6 for name, values in times.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=90, help="day partitions added for the 'many' rounds")
    parser.add_argument("--runs", type=int, default=200, help="responses committed in a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each, alternating")
    args = parser.parse_args()
    body = {"model": "fake", "input": '#fake {"text": "a short answer of a few words"}', "stream": True}
    # (no retention pass meanwhile: it would drop the added partitions, which hold no log)
    async with running_stack(RESPONSES_RETENTION_INTERVAL_SECONDS="3600") as stack, aiohttp.ClientSession() as client:
        async with client.post(f"{stack.api_url}/responses", json=body, headers=stack.headers) as answer:
            lines = (await answer.read()).decode().splitlines()
        stream = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
        for event in stream:
            event.pop("sequence_number")
        answered_id = stream[0]["response"]["id"]
        held = server_settings(generic_plans=True)
        engine = create_async_engine(stack.database_url, connect_args={"server_settings": held})
        results: dict[str, list[dict[str, float]]] = {"few": [], "many": []}
        try:
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                find = text("SELECT account_id FROM responses WHERE id = :id")
                account_id = str(await conn.scalar(find, {"id": answered_id}))
                count = text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'event_log'::regclass")
                few = int(await conn.scalar(count) or 0)
                for _ in range(args.rounds):
                    results["few"].append(await timed_round(conn, account_id, stream, answered_id, args.runs))
                    await add_partitions(conn, args.days)
                    try:
                        results["many"].append(await timed_round(conn, account_id, stream, answered_id, args.runs))
                    finally:
                        await drop_partitions(conn, args.days)
        finally:
            await engine.dispose()
    p50 = {
        kind: {name: statistics.median(one[name] for one in rounds) for name in rounds[0]}
        for kind, rounds in results.items()
    }
    report = {
        "partitions": {"few": few, "many": few + args.days},
        "p50_us": {kind: {name: round(value) for name, value in by_name.items()} for kind, by_name in p50.items()},
        "many_over_few": {name: round(p50["many"][name] / p50["few"][name], 2) for name in p50["few"]},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

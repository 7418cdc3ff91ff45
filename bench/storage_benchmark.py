"""What a streamed token costs Postgres: table, index and TOAST bytes and WAL, per output token.

    python bench/storage_benchmark.py [--responses 128] [--tokens 256] [--concurrency 16] [--rounds 2]
                                      [--live-log-vacuum-seconds S]

Starts a Postgres cluster of its own (tests/private_postgres.py), so that nothing else writes
WAL, and the stack (bench/stack.py) on it. Each round streams `--responses` stored responses of
`--tokens` tokens, `--concurrency` at a time, one token every `--token-delay` seconds (a GPU's
pace), and reports the growth of every table of the database (heap, indexes, TOAST; the event
log apart, and each table's) and the WAL written, per output token and as a multiple of the
tokens' text, with the WAL by kind of record (pg_waldump's statistics: which writes it is). The
first round starts from a fresh database; a VACUUM runs between rounds: a later round is steady
traffic, reusing what VACUUM freed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import running_stack
from bench.stream_benchmark import load
from tests.private_postgres import private_cluster

_SIZES = """
    SELECT c.relname,
           pg_relation_size(c.oid) AS heap,
           pg_indexes_size(c.oid) AS index,
           coalesce(pg_total_relation_size(c.reltoastrelid), 0) AS toast
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind = 'r' AND n.nspname = 'public'
"""


async def snapshot(conn: asyncpg.Connection) -> dict[str, Any]:
    tables = {row["relname"]: dict(row) for row in await conn.fetch(_SIZES)}
    wal = await conn.fetchval("SELECT pg_current_wal_flush_lsn()")
    return {"tables": tables, "wal": wal}


# A line of `pg_waldump --stats=record`: kind, count (%), record bytes (%), full-page image bytes
# (%), combined bytes (%).
_WAL_RECORD = re.compile(r"^(\S+)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)")


def wal_per_token(stats: str, tokens: int, at_least: float = 2.0) -> dict[str, dict[str, float]]:
    """WAL bytes per token by kind of record (those of at least `at_least` bytes a token)."""
    kinds: dict[str, dict[str, float]] = {}
    for line in stats.splitlines():
        found = _WAL_RECORD.match(line)
        if found is None or found[1] == "Total":
            continue
        name, count, _, images, combined = found[1], *map(int, found.groups()[1:])
        if combined / tokens >= at_least:
            kinds[name] = {
                "records_per_token": round(count / tokens, 2),
                "bytes_per_token": round(combined / tokens, 1),
                "of_which_page_images": round(images / tokens, 1),
            }
    return dict(sorted(kinds.items(), key=lambda kind: -kind[1]["bytes_per_token"]))


def growth(
    before: dict[str, Any], after: dict[str, Any], wal_bytes: int, tokens: int, text_bytes: int
) -> dict[str, Any]:
    def grown(tables: list[str], part: str) -> int:
        return sum(after["tables"][t][part] - before["tables"].get(t, {}).get(part, 0) for t in tables)

    everything = list(after["tables"])
    log = [t for t in everything if t.startswith("event_log") or t == "event_templates"]  # a partition a day
    figures: dict[str, Any] = {"tokens": tokens, "text_bytes": text_bytes, "wal_bytes": wal_bytes}
    for name, tables in (("all_tables", everything), ("event_log", log)):
        heap, index, toast = grown(tables, "heap"), grown(tables, "index"), grown(tables, "toast")
        total = heap + index + toast
        figures[name] = {
            "heap": heap,
            "index": index,
            "toast": toast,
            "bytes_per_token": round(total / tokens, 1),
            "times_text": round(total / text_bytes, 1),
        }
    by_table = {t: {part: grown([t], part) for part in ("heap", "index", "toast")} for t in everything}
    figures["by_table_bytes_per_token"] = {
        t: {part: round(size / tokens, 1) for part, size in parts.items() if size}
        for t, parts in sorted(by_table.items(), key=lambda kv: -sum(kv[1].values()))
        if any(parts.values())
    }
    figures["wal_bytes_per_token"] = round(wal_bytes / tokens, 1)
    figures["wal_times_text"] = round(wal_bytes / text_bytes, 1)
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--token-delay", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--live-log-vacuum-seconds", type=float, default=2.0, help="RESPONSES_LIVE_LOG_VACUUM_SECONDS")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    words = [f"w{i}" for i in range(args.tokens)]  # (the fake streams a word a token, a space between)
    text_bytes_each = len(" ".join(words))
    script = "#fake " + json.dumps({"text": " ".join(words), "delay": args.token_delay})
    rounds = []
    with private_cluster() as cluster:
        async with running_stack(
            max_output_tokens=args.tokens * 2,
            postgres_admin_url=cluster.url(),
            RESPONSES_LIVE_LOG_VACUUM_SECONDS=str(args.live_log_vacuum_seconds),
        ) as stack:
            body = {"model": "fake", "input": script, "stream": True, "stream_options": {"include_obfuscation": False}}
            stream = (f"{stack.api_url}/responses", body, stack.headers, b"response.output_text.delta")
            conn = await asyncpg.connect(stack.database_url.replace("+asyncpg", ""))
            try:
                for number in range(args.rounds):
                    if number:
                        await conn.execute("VACUUM")
                    before = await snapshot(conn)
                    per_slot = -(-args.responses // args.concurrency)
                    run = await load(*stream, args.concurrency, per_slot, args.tokens * args.token_delay)
                    after = await snapshot(conn)
                    wal = await conn.fetchval("SELECT pg_wal_lsn_diff($1, $2)", after["wal"], before["wal"])
                    responses = args.concurrency * per_slot - run.errors
                    row = growth(before, after, int(wal), responses * args.tokens, responses * text_bytes_each)
                    records = cluster.wal_records(int(before["wal"]), int(after["wal"]))
                    row["wal_by_record"] = wal_per_token(records, responses * args.tokens)
                    row |= {"round": number + 1, "responses": responses, "errors": run.errors}
                    rounds.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                await conn.close()
    if args.out:
        args.out.write_text(json.dumps({"arguments": vars(args) | {"out": str(args.out)}, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

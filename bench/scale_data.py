"""Fills a database to production size, in SQL (minutes, not hours):

    python bench/scale_data.py DATABASE_URL [--responses 1000000] [--accounts 1000] [--chain 10000]

`--responses` finished single-turn responses spread over `--accounts` accounts (one of them the
template's), each with an input and an output item, one in `--events-every` with its event log;
and one chain of `--chain` turns. Every row is a copy of one response made through the API
beforehand (`template`, with its items and events), so the rows are what the server writes. Used by scale_benchmark.py.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

import asyncpg

CHAIN_PREFIX = "resp_chain_"


@dataclass(frozen=True)
class Size:
    responses: int = 1_000_000
    accounts: int = 1000
    chain: int = 10_000
    events_every: int = 10


def chain_turn(depth: int) -> str:
    return f"{CHAIN_PREFIX}{depth:06d}"


_ACCOUNTS = """
INSERT INTO accounts (id, name)
SELECT 'acct_scale_' || a, 'scale-' || a FROM generate_series(1, $1::int) a ON CONFLICT DO NOTHING
"""

# Oldest first, one a second up to now, so retention and age-ordered reads see a realistic spread.
_RESPONSES = """
INSERT INTO responses (id, account_id, model, status, background, stream, store, instructions, metadata,
                       settings, chain_depth, context_branches, context_depths, usage, created_at, started_at,
                       completed_at)
SELECT 'resp_scale_' || lpad(n::text, 8, '0'),
       CASE WHEN n % $2 = 0 THEN t.account_id ELSE 'acct_scale_' || (n % $2) END, t.model, 'completed', n % 4 = 0,
       n % 2 = 0, true, t.instructions, t.metadata, t.settings, 0, ARRAY[nextval('branch_ids')], ARRAY[0], t.usage,
       now() - make_interval(secs => $1 - n), now() - make_interval(secs => $1 - n),
       now() - make_interval(secs => $1 - n)
FROM generate_series(1, $1::int) n, responses t WHERE t.id = $3
"""

_ITEMS = """
INSERT INTO items (id, response_id, side, position, type, payload, branch_id, depth)
SELECT left(i.id, 4) || substr(r.id, 6) || i.side || i.position, r.id, i.side, i.position, i.type, i.payload,
       r.context_branches[1], r.chain_depth
FROM responses r, items i
WHERE r.id LIKE $2 AND i.response_id = $1
"""

_EVENTS = """
INSERT INTO event_log (log_key, sequence_number, template, run_length, output_at, type, payload, output_path,
                       committed_at)
SELECT r.log_key, e.sequence_number, e.template, e.run_length, e.output_at, e.type, e.payload, e.output_path,
       r.created_at + (e.committed_at - t.created_at)
FROM responses r, event_log e, responses t
WHERE r.id LIKE 'resp_scale_%' AND substr(r.id, 12)::int % $2 = 0 AND t.id = $1 AND e.log_key = t.log_key
"""

_TEMPLATES = """
INSERT INTO event_templates (log_key, id, type, prefix, suffix)
SELECT r.log_key, t.id, t.type, t.prefix, t.suffix
FROM responses r, event_templates t
WHERE r.id LIKE 'resp_scale_%' AND substr(r.id, 12)::int % $2 = 0
  AND t.log_key = (SELECT log_key FROM responses WHERE id = $1)
"""

# One branch: each turn continues the one before it (docs/architecture.md, "Chains").
_CHAIN = """
WITH branch AS (SELECT nextval('branch_ids') AS id)
INSERT INTO responses (id, account_id, model, status, background, stream, store, metadata, settings,
                       previous_response_id, context_parent_id, chain_depth, context_branches, context_depths,
                       branch_continued, usage, created_at, started_at, completed_at)
SELECT 'resp_chain_' || lpad(d::text, 6, '0'), t.account_id, t.model, 'completed', false, false, true, t.metadata,
       t.settings, CASE WHEN d > 0 THEN 'resp_chain_' || lpad((d - 1)::text, 6, '0') END,
       CASE WHEN d > 0 THEN 'resp_chain_' || lpad((d - 1)::text, 6, '0') END, d, ARRAY[branch.id], ARRAY[d],
       d < $1 - 1, t.usage, now() - make_interval(secs => $1 - d), now(), now()
FROM generate_series(0, $1::int - 1) d, responses t, branch WHERE t.id = $2
"""


async def fill(database_url: str, template: str, size: Size) -> dict[str, float]:
    """Adds the rows; returns the seconds each step took."""
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
    seconds: dict[str, float] = {}
    try:
        for step, statement, args in (
            ("accounts", _ACCOUNTS, (size.accounts,)),
            ("responses", _RESPONSES, (size.responses, size.accounts, template)),
            ("items", _ITEMS, (template, "resp_scale_%")),
            ("events", _EVENTS, (template, size.events_every)),
            ("event_templates", _TEMPLATES, (template, size.events_every)),
            ("chain", _CHAIN, (size.chain, template)),
            ("chain_items", _ITEMS, (template, "resp_chain_%")),
            ("analyze", "ANALYZE", ()),
        ):
            started = time.perf_counter()
            await conn.execute(statement, *args)
            seconds[step] = round(time.perf_counter() - started, 1)
    finally:
        await conn.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("database_url")
    parser.add_argument("--template", required=True, help="id of a finished response to copy")
    parser.add_argument("--responses", type=int, default=Size.responses)
    parser.add_argument("--accounts", type=int, default=Size.accounts)
    parser.add_argument("--chain", type=int, default=Size.chain)
    parser.add_argument("--events-every", type=int, default=Size.events_every)
    args = parser.parse_args()
    size = Size(args.responses, args.accounts, args.chain, args.events_every)
    print(asyncio.run(fill(args.database_url, args.template, size)))


if __name__ == "__main__":
    main()

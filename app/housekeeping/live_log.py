"""The live partition of the event log, `event_log_live` (migration 0021): the logs of the
responses still running. Its rows are deleted as fast as they are written (a response's end moves
its log, folded, to its day's partition), so the partition stays as small as what streams between
two of its vacuums, which every worker runs every RESPONSES_LIVE_LOG_VACUUM_SECONDS: autovacuum,
which looks at a table at most once a minute, would let it grow a minute of streaming between.

A vacuum of it takes no lock its writers wait on (it never truncates the partition: its
storage parameters) and skips a turn while another worker's runs.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.storage.driver import autocommit

PARTITION = "event_log_live"


async def vacuum(engine: AsyncEngine) -> None:
    async with autocommit(engine) as conn:
        await conn.execute(text(f"VACUUM (SKIP_LOCKED) {PARTITION}"))

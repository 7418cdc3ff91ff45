"""What a test that hangs is waiting on, printed before pytest-timeout ends it: every thread's
stack, every asyncio task's, and the Postgres backends waiting on a lock with the ones that
block them. pytest-timeout shows only the main thread, whose loop is idle in `select` while
the task that hangs waits: that says nothing about which await it is."""

from __future__ import annotations

import asyncio
import faulthandler
import sys
import threading

import asyncpg

_LOCK_WAITS = """
    SELECT a.pid, a.datname, a.state, a.wait_event_type, a.wait_event, left(a.query, 300) AS query,
           pg_blocking_pids(a.pid) AS blocked_by,
           (SELECT array_agg(b.state || ': ' || left(b.query, 200)) FROM pg_stat_activity b
            WHERE b.pid = ANY(pg_blocking_pids(a.pid))) AS blockers
    FROM pg_stat_activity a
    WHERE a.wait_event_type = 'Lock' OR a.state = 'idle in transaction'
"""


def report(admin_url: str) -> None:
    out = sys.stderr
    print("\n===== a test is about to time out: what it waits on =====", file=out)
    faulthandler.dump_traceback(file=out, all_threads=True)
    every_task: set[asyncio.Task[object]] = set(asyncio.tasks._all_tasks)  # type: ignore[attr-defined]
    for task in every_task:  # (every loop's tasks, read from another thread)
        if not task.done():
            print(f"--- task {task.get_name()}", file=out)
            task.print_stack(limit=12, file=out)
    try:
        rows = asyncio.run(_lock_waits(admin_url))
    except Exception as exc:
        print(f"(Postgres not asked: {exc!r})", file=out)
    else:
        for row in rows:
            print(f"--- backend {dict(row)}", file=out)
    print("===== end of the report =====", file=out, flush=True)


async def _lock_waits(admin_url: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        return list(await conn.fetch(_LOCK_WAITS, timeout=5))
    finally:
        await conn.close()


def watchdog(seconds: float, admin_url: str) -> threading.Timer:
    timer = threading.Timer(seconds, report, args=(admin_url,))
    timer.daemon = True
    timer.start()
    return timer

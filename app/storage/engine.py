"""The one async engine of a process.

A connection the server ended while it sat idle (a Postgres restart, a failover, an idle
timeout) is replaced when it is next taken, so no request fails for it. The driver notices the
server closing the socket, so the check is a flag, not a round trip (SQLAlchemy's pre-ping would
cost one per checkout).
"""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from app.settings import Settings

# The token path's statements (app/storage/driver.py) take arrays, one element a response or an
# event. Postgres plans such a prepared statement afresh at each run by default: the plan made for
# any arrays looks dearer than one made for arrays of one, so it is never chosen. Planning costs
# more than running them, and the plan for any arrays is the same index lookups. One response's
# insert, claim and log read took 0.90 → 0.50 ms, 0.55 → 0.43 and 0.92 → 0.38 here
# (`python bench/statement_plans.py`, docs/bench-results/statement-plans.json).
# That one plan is made at a connection's first run of the statement, whatever the tables hold
# then, and kept until their statistics change: made while they are nearly empty (a new
# deployment, a benchmark's fresh database), it read `responses` whole, at a cost that grew with
# every response stored. They are all lookups by key: they are planned without sequential scans.
GENERIC_PLANS = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}

# No statement of the service is compiled (JIT): Postgres compiles one whose cost estimate passes
# `jit_above_cost`, at each run, and the estimate of any statement that reads the event log by a
# key taken from a row grows with the day partitions retention keeps: the console's system page,
# whose sample of the last hour's first outputs reads a log per response, and a followers' read
# before it read through `event_log_after` (1.8 s a read, compiled, with 400 partitions:
# `python bench/log_partitions.py --days 400` at d08c08a). The service's statements are lookups by
# key and bounded pages, which compiling never pays for.
NO_JIT = {"jit": "off"}


def create_engine(
    settings: Settings, pool_size: int | None = None, max_overflow: int | None = None, generic_plans: bool = False
) -> AsyncEngine:
    """The process's engine; a component that must never wait for the process's pool asks for a
    small one of its own (`pool_size`, `max_overflow`). `generic_plans`: for the held connections
    of the token path's statements (GENERIC_PLANS)."""
    engine = create_async_engine(
        settings.database_url,
        pool_size=settings.db_pool_size if pool_size is None else pool_size,
        max_overflow=settings.db_max_overflow if max_overflow is None else max_overflow,
        pool_timeout=settings.db_pool_timeout,
        connect_args={"server_settings": server_settings(generic_plans)},
    )
    event.listen(engine.sync_engine, "checkout", _refuse_closed)
    return engine


def server_settings(generic_plans: bool) -> dict[str, str]:
    """The settings of a connection of the service: of a held one (GENERIC_PLANS), or of any."""
    return NO_JIT | GENERIC_PLANS if generic_plans else NO_JIT


def driver_closed(driver_connection: asyncpg.Connection | None) -> bool:
    return driver_connection is None or driver_connection.is_closed()


def _refuse_closed(dbapi_connection: Any, record: ConnectionPoolEntry, proxy: Any) -> None:
    # The pool answers DisconnectionError by connecting this entry afresh.
    if driver_closed(record.driver_connection):
        raise DisconnectionError("the server closed this connection while it was idle")

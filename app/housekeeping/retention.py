"""Retention: expired data is deleted from Postgres, not hidden (docs/configuration.md). An
expired event log is unreadable the moment its response is marked purged, and its rows go with
its day's partition (app/housekeeping/log_partitions.py), dropped once every log of that day has expired.

Every worker runs it periodically. Each step is one statement over a small batch, found through
an index of its own in the order it came due and locked with SKIP LOCKED: it commits in
milliseconds, never waits for a row someone holds, and concurrent runs share the work. A pass
repeats its steps while they find full batches (a backlog), and says how far behind retention
is: the time since the oldest row still due came due.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.housekeeping import live_log, log_partitions
from app.process.metrics import RETENTION_BEHIND, RETENTION_REMOVED
from app.settings import Settings
from app.storage.idempotency import KEY_HOURS
from app.storage.tables import PENDING
from app.storage.vector_stores import EXPIRED_KEPT_HOURS

log = logging.getLogger(__name__)

BATCH = 200  # rows per statement: long enough to be efficient, short enough that no lock lingers
FOREGROUND_LOG_SECONDS = 60.0  # nothing replays a foreground stream; its followers are long done


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    stored: timedelta
    unstored_background: timedelta
    stream_log: timedelta
    foreground_log: timedelta = timedelta(seconds=FOREGROUND_LOG_SECONDS)
    webhook_deliveries: timedelta = timedelta(days=30)  # delivered or given up: kept as responses are
    idempotency_keys: timedelta = timedelta(hours=KEY_HOURS)  # then free for a new request
    files: timedelta = timedelta(0)  # a file goes at its own expires_at (its pieces with it)
    # An expired vector store shows as `expired` for a day, then goes (its files' chunks with it).
    vector_stores: timedelta = timedelta(hours=EXPIRED_KEPT_HOURS)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        return cls(
            timedelta(days=settings.retention_days),
            timedelta(seconds=settings.unstored_background_seconds),
            timedelta(hours=settings.stream_log_hours),
            webhook_deliveries=timedelta(days=settings.retention_days),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """Removes one kind of expired data, a batch at a time. `due` is the condition and `since` the
    column whose order it came due in: the predicate and the column of `index`."""

    name: str
    due: str
    since: str
    index: str
    purge_log: bool  # remove only the event log, keeping the response
    table: str = "responses"
    key: str = "id"

    def batch_statement(self) -> str:
        due = (
            f"SELECT {self.key} FROM {self.table} WHERE {self.due} AND {self.since} < now() - CAST(:age AS interval) "
            f"ORDER BY {self.since} LIMIT :batch FOR UPDATE SKIP LOCKED"
        )
        if not self.purge_log:  # a response's items (ON DELETE CASCADE) and event log (a trigger) go with it
            return (
                f"WITH gone AS (DELETE FROM {self.table} WHERE ({self.key}) IN ({due}) RETURNING 1) "
                "SELECT count(*) FROM gone"
            )
        return f"""
            WITH due AS ({due}),
            marked AS (UPDATE responses r SET events_purged_at = now() FROM due WHERE r.id = due.id
                       RETURNING r.id, r.log_key),
            -- The log's rows go with their day's partition (app/housekeeping/log_partitions.py); only
            -- a day that had none holds them in the default one, and only a log that never ended
            -- where it should have (its response's status set by hand) in the live one.
            gone AS (DELETE FROM event_log_default e USING marked WHERE e.log_key = marked.log_key),
            live AS (DELETE FROM {live_log.PARTITION} e USING marked WHERE e.log_key = marked.log_key),
            templates AS (DELETE FROM event_templates t USING marked WHERE t.log_key = marked.log_key),
            snapshots AS (DELETE FROM output_snapshots s USING marked WHERE s.response_id = marked.id)
            SELECT count(*) FROM marked"""

    def behind_statement(self) -> str:
        """Seconds past its due time of the oldest row still due (null: none)."""
        return (
            f"SELECT extract(epoch FROM now() - CAST(:age AS interval) - min({self.since})) FROM {self.table} "
            f"WHERE {self.due} AND {self.since} < now() - CAST(:age AS interval)"
        )


STEPS = (
    # a response in a conversation is kept as long as its conversation: its items are the conversation's
    Step("stored", "store AND conversation_id IS NULL", "created_at", "ix_responses_stored_expiry", purge_log=False),
    Step("unstored_background", "NOT store", "completed_at", "ix_responses_unstored_expiry", purge_log=False),
    Step(
        "stream_log",
        "events_purged_at IS NULL AND background",
        "completed_at",
        "ix_responses_stream_log_expiry",
        purge_log=True,
    ),
    Step(
        "foreground_log",
        "events_purged_at IS NULL AND NOT background",
        "completed_at",
        "ix_responses_foreground_log_expiry",
        purge_log=True,
    ),
    Step(
        "webhook_deliveries",
        f"NOT ({PENDING})",
        "created_at",
        "ix_webhook_deliveries_done_expiry",
        purge_log=False,
        table="webhook_deliveries",
    ),
    Step(
        "idempotency_keys",
        "true",
        "created_at",
        "ix_idempotency_keys_expiry",
        purge_log=False,
        table="idempotency_keys",
        key="account_id, key",
    ),
    Step("files", "expires_at IS NOT NULL", "expires_at", "ix_files_expiry", purge_log=False, table="files"),
    Step(
        "vector_stores",
        "expires_at IS NOT NULL",
        "expires_at",
        "ix_vector_stores_expiry",
        purge_log=False,
        table="vector_stores",
    ),
)


for _step in STEPS:  # every kind is served from the start, at 0
    RETENTION_REMOVED.labels(_step.name)
    RETENTION_BEHIND.labels(_step.name)


def _age(policy: RetentionPolicy, step: Step) -> timedelta:
    age: timedelta = getattr(policy, step.name)
    return age


@dataclass(slots=True)
class Report:
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys([s.name for s in STEPS], 0))
    behind_seconds: dict[str, float] = field(default_factory=dict)  # only the steps still behind
    seconds: float = 0.0


async def run_step(engine: AsyncEngine, policy: RetentionPolicy, step: Step, batch: int = BATCH) -> int:
    """One batch of one step, in a transaction of its own; how many responses it removed (or
    whose event logs it removed)."""
    async with engine.begin() as conn:
        removed = await conn.scalar(text(step.batch_statement()), {"age": _age(policy, step), "batch": batch})
    return int(removed or 0)


async def behind(engine: AsyncEngine, policy: RetentionPolicy) -> dict[str, float]:
    """How far behind each step is: the seconds since its oldest due row came due."""
    lag: dict[str, float] = {}
    async with engine.connect() as conn:
        for step in STEPS:
            seconds = await conn.scalar(text(step.behind_statement()), {"age": _age(policy, step)})
            if seconds is not None:
                lag[step.name] = round(float(seconds), 1)
    return lag


async def apply(engine: AsyncEngine, policy: RetentionPolicy, report_every: float) -> Report:
    """Runs the steps in turn while any finds a full batch (a backlog is worked off without a
    pause), saying every `report_every` seconds how far it got, and at the end how far behind it is."""
    report = Report()
    started = reported = time.monotonic()
    backlog = list(STEPS)
    while backlog:
        full = []
        for step in backlog:
            removed = await run_step(engine, policy, step)
            report.removed[step.name] += removed
            RETENTION_REMOVED.labels(step.name).inc(removed)
            if removed == BATCH:
                full.append(step)
        backlog = full
        if backlog and time.monotonic() - reported >= report_every:
            reported = time.monotonic()
            log.info("retention: removed %s so far; behind by %s", report.removed, await behind(engine, policy))
    partitions = await log_partitions.maintain(engine)
    report.removed["log_partitions"] = len(partitions.dropped)
    report.seconds = round(time.monotonic() - started, 2)
    report.behind_seconds = await behind(engine, policy)
    for step in STEPS:
        RETENTION_BEHIND.labels(step.name).set(report.behind_seconds.get(step.name, 0.0))
    if any(report.removed.values()):
        log.info("retention: removed %s in %.2f s; behind by %s", report.removed, report.seconds, report.behind_seconds)
    return report

"""Retention: expired data is deleted from Postgres, not hidden (README, "Configuration").

Every worker runs it periodically; SKIP LOCKED keeps concurrent runs from waiting on each other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import responses as responses_db
from app.db.tables import response_events, responses
from app.settings import Settings

log = logging.getLogger(__name__)

BATCH = 500
FOREGROUND_LOG_SECONDS = 60.0  # nothing replays a foreground stream; its followers are long done


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    stored: timedelta
    unstored_background: timedelta
    stream_log: timedelta
    foreground_log: timedelta = timedelta(seconds=FOREGROUND_LOG_SECONDS)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        return cls(
            timedelta(days=settings.retention_days),
            timedelta(seconds=settings.unstored_background_seconds),
            timedelta(hours=settings.stream_log_hours),
        )


async def expire_responses(engine: AsyncEngine, policy: RetentionPolicy) -> int:
    """Deletes responses past their retention (each like a DELETE: chains stay consistent)."""
    async with engine.begin() as conn:
        ids = (
            (
                await conn.execute(
                    select(responses.c.id)
                    .where(
                        or_(
                            and_(responses.c.store, responses.c.created_at < func.now() - policy.stored),
                            and_(
                                ~responses.c.store, responses.c.completed_at < func.now() - policy.unstored_background
                            ),
                        )
                    )
                    .order_by(responses.c.created_at)
                    .limit(BATCH)
                    .with_for_update(skip_locked=True)
                )
            )
            .scalars()
            .all()
        )
        for response_id in ids:
            await responses_db.delete_response(conn, response_id, None)
    return len(ids)


async def purge_event_logs(engine: AsyncEngine, policy: RetentionPolicy) -> int:
    """Removes the event logs of responses that ended long enough ago; returns how many."""
    async with engine.begin() as conn:
        due = (
            select(responses.c.id)
            .where(
                responses.c.events_purged_at.is_(None),
                responses.c.completed_at.is_not(None),
                or_(
                    and_(responses.c.background, responses.c.completed_at < func.now() - policy.stream_log),
                    and_(~responses.c.background, responses.c.completed_at < func.now() - policy.foreground_log),
                ),
            )
            .limit(BATCH)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        ids = (
            (
                await conn.execute(
                    update(responses)
                    .where(responses.c.id.in_(due))
                    .values(events_purged_at=func.now())
                    .returning(responses.c.id)
                )
            )
            .scalars()
            .all()
        )
        if ids:
            await conn.execute(delete(response_events).where(response_events.c.response_id.in_(ids)))
    return len(ids)


async def apply(engine: AsyncEngine, policy: RetentionPolicy) -> None:
    expired = await expire_responses(engine, policy)
    purged = await purge_event_logs(engine, policy)
    if expired or purged:
        log.info("retention: %d responses expired, %d event logs purged", expired, purged)

"""Ending a response now, outside the worker that generates it (a cancel of a queued response,
the reaper's end of one whose worker died): its closing events and its terminal status commit in
one transaction, and only then go out on its channel (design invariant 2). A worker ends the
responses it runs the same way, batched with their output (app/events/writer.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.events import channel
from app.protocol.encoding import WireEvent
from app.protocol.shapes import Event
from app.storage import events as events_db
from app.storage.responses import Outcome


class Endings:
    """The responses ended in one transaction, and the events each published once it commits."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.published: dict[str, list[WireEvent]] = {}

    async def end(self, response_id: str, events: Sequence[Event], outcome: Outcome) -> bool:
        """Appends the closing events (the terminal one last) and ends the response; False when it
        had already ended elsewhere (nothing is written then)."""
        numbered = await events_db.end(self.conn, response_id, events, outcome)
        if numbered:
            self.published[response_id] = numbered
        return bool(numbered)


@asynccontextmanager
async def ending_now(engine: AsyncEngine, redis: Redis, events_channel: str) -> AsyncIterator[Endings]:
    """A transaction in which responses are ended; what ended is published after its commit,
    and nothing when it fails."""
    async with engine.begin() as conn:
        endings = Endings(conn)
        yield endings
    await channel.publish(redis, events_channel, endings.published)

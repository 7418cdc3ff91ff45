"""The event logs followers read, read for all the followers that ask at the same moment with one
statement (app/storage/events.py `logs_after`) on one of a few connections held for it.

A follower needs Postgres only to read: where it starts (`starting_after`), after a missed
message, after a notice, and when it has been idle. Read one by one, a burst of followers took a
pool connection each and the rest waited, then failed; read together, ten thousand followers of
twenty responses starting at once cost a few statements, and followers of one response that ask
from the same point share one read.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from app.process.batching import Batched
from app.storage import events as events_db
from app.storage.events import LogPage
from app.storage.held import HeldConnections

PAGE = 1000  # events of one response in one read; a longer log is read page after page
LANES = 4  # reads at once, at most: a long one (a page of large events) holds up only its own


class LogReader:
    def __init__(self, engine: AsyncEngine) -> None:
        self._connections = HeldConnections(engine, LANES)
        self._reads = Batched[tuple[str, int], LogPage](self._read_many, "read-logs", lanes=LANES)

    async def read(self, response_id: str, after: int) -> LogPage:
        """The response's events after `after` (at most PAGE) and its row, as one read saw them."""
        page = await self._reads((response_id, after))
        assert page is not None  # (logs_after answers every key)
        return page

    async def _read_many(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], LogPage]:
        async with self._connections.use() as conn:  # one statement, in autocommit
            return await events_db.logs_after(conn, wanted, PAGE)

    async def close(self) -> None:
        await self._connections.close()

"""A worker's copies of the conversations it serves: their items, decoded, kept between turns.

Every turn of a conversation sends the model all of its items. Read whole each time, a 1,000-turn
conversation costs its worker about 10 ms before the first token (the rows, then decoding them);
with a copy, a claim reads only the items that joined since, and the conversation's count of
removals: any removal (an item deleted, or a response and its items) makes the copy read whole
again. The copies are bounded by the size of their JSON, least recently used first out. Items
are never changed once stored, and the lists handed out are never changed either: a generation
may keep reading one while a later turn's list is built from it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.process.metrics import CONVERSATION_ITEMS_READ
from app.protocol.shapes import Item
from app.storage import conversations as conversations_db
from workers.caches.kept_copies import KeptCopies


@dataclass(frozen=True, slots=True)
class _Copy:
    items_removed: int
    items: list[Item]
    last: tuple[int, int]  # the place of its last item (FROM_START: it has none)
    size: int  # the length of its items' JSON


class ConversationItems:
    def __init__(self, limit_bytes: int) -> None:
        self._copies: KeptCopies[str, _Copy] = KeptCopies(limit_bytes, lambda copy: copy.size)

    @property
    def bytes_kept(self) -> int:
        """The length of the JSON of the items it keeps."""
        return self._copies.bytes_kept

    async def read(self, conn: AsyncConnection, conversation_ids: Collection[str]) -> dict[str, list[Item]]:
        """Each conversation's items as they are now, in order (a deleted one has none)."""
        copies = {c: copy for c in conversation_ids if (copy := self._copies.take(c)) is not None}
        after = {c: copies[c].last if c in copies else conversations_db.FROM_START for c in conversation_ids}
        tails = await conversations_db.items_after(conn, after)
        stale = [c for c in copies if c in tails and tails[c].items_removed != copies[c].items_removed]
        if stale:
            tails |= await conversations_db.items_after(conn, dict.fromkeys(stale, conversations_db.FROM_START))
            for conversation_id in stale:
                del copies[conversation_id]
        found: dict[str, list[Item]] = {}
        for conversation_id in conversation_ids:
            tail = tails.get(conversation_id)
            if tail is None:
                found[conversation_id] = []
                continue
            kept = copies.get(conversation_id)
            copy = self._extended(kept, tail)
            self._copies.keep(conversation_id, copy)
            found[conversation_id] = copy.items
            CONVERSATION_ITEMS_READ.labels("cache").inc(len(kept.items) if kept else 0)
            CONVERSATION_ITEMS_READ.labels("postgres").inc(len(tail.items))
        return found

    @staticmethod
    def _extended(kept: _Copy | None, tail: conversations_db.Tail) -> _Copy:
        if kept is None:
            return _Copy(tail.items_removed, tail.items, tail.last or conversations_db.FROM_START, tail.size)
        if not tail.items:
            return kept
        return _Copy(kept.items_removed, kept.items + tail.items, tail.last or kept.last, kept.size + tail.size)

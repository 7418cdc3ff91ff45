"""A worker's copies of the chains it serves: each branch's items, decoded, kept between turns.

A turn continuing a chain (`previous_response_id`) sends the model every turn before it. Read
whole each time, turn 1,000 costs its worker several milliseconds before the first token (2,000
rows, then decoding them). With a copy of each branch its claims read (app/storage/items.py,
"Chains" in docs/architecture.md), a claim reads only the items after the copy's last one, and
how many items the branch still has up to it: a branch's items are never changed or added
before its last depth (depths are not reused), so a count that differs means a response of it
was deleted, and the branch is read whole again. The copies are bounded by the size of their
JSON, least recently used first out. The lists handed out are new and their items never
changed: a generation may keep reading one while a later turn's is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.process.metrics import CHAIN_ITEMS_READ
from app.protocol.shapes import Item
from app.storage import items as items_db
from app.storage.items import BranchTail, Span
from workers.caches.kept_copies import KeptCopies


class ChainContexts:
    def __init__(self, limit_bytes: int) -> None:
        self._copies: KeptCopies[int, BranchTail] = KeptCopies(limit_bytes, lambda copy: copy.size)

    @property
    def bytes_kept(self) -> int:
        """The length of the JSON of the items it keeps."""
        return self._copies.bytes_kept

    async def read(self, conn: AsyncConnection, paths: Mapping[str, Sequence[Span]]) -> dict[str, list[Item]]:
        """Each response's context: the items of the spans of branches it runs through, in order."""
        wanted = items_db.widest(paths)
        if not wanted:
            return {response_id: [] for response_id in paths}
        copies = {b: copy for b in wanted if (copy := self._copies.take(b)) is not None}
        tails = await items_db.branch_tails(conn, {b: copy.keys[-1] for b, copy in copies.items()}, wanted)
        stale = [b for b, copy in copies.items() if tails[b].counted != len(copy.keys)]
        if stale:  # a response of it was deleted: read it whole
            tails |= await items_db.branch_tails(conn, {}, {b: wanted[b] for b in stale})
            for branch_id in stale:
                del copies[branch_id]
        branches: dict[int, BranchTail] = {}
        for branch_id, tail in tails.items():
            kept = copies.get(branch_id)
            branches[branch_id] = copy = tail if kept is None else kept.then(tail)
            if copy.keys:  # (an empty one has no place to read on from)
                self._copies.keep(branch_id, copy)
            CHAIN_ITEMS_READ.labels("cache").inc(len(kept.items) if kept else 0)
            CHAIN_ITEMS_READ.labels("postgres").inc(len(tail.items))
        return items_db.assembled(paths, branches)

"""A keyset page of a query's rows by (created_at, id): one range of an index whatever the
table's size, `after` or `before` a row's place, in either order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

Place = tuple[datetime, str]  # a row's (created_at, id): a cursor


async def keyset_page(
    conn: AsyncConnection,
    query: Select[Any],
    columns: Sequence[Any],
    *,
    ascending: bool,
    limit: int,
    after: Place | None = None,
    before: Place | None = None,
) -> tuple[list[Any], bool]:
    """The page's rows in its order, and whether there are more. A page `before` a cursor is the
    one just before it: read backwards from the cursor, then put in order."""
    place = tuple_(*columns)
    if after is not None:
        query = query.where(place > tuple_(*after) if ascending else place < tuple_(*after))
    if before is not None:
        query = query.where(place < tuple_(*before) if ascending else place > tuple_(*before))
    forward = ascending != (before is not None)
    rows = list(
        (await conn.execute(query.order_by(*(c if forward else c.desc() for c in columns)).limit(limit + 1))).all()
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    return (rows[::-1] if before is not None else rows), has_more

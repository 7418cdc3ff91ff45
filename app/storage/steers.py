"""Steering input (WebSocket mode's `response.steer`): stored before the steer is acknowledged, so
that the worker running the response, or the one continuing it after a crash, finds it; marked
with the response that took it as input once that one is created."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.shapes import Item
from app.storage.tables import response_steers


async def add(conn: AsyncConnection, steer_id: str, response_id: str, items: list[Item]) -> None:
    await conn.execute(insert(response_steers).values(id=steer_id, response_id=response_id, input=items))


async def waiting(conn: AsyncConnection, response_id: str) -> bool:
    """Whether a steer of this response waits for its successor (its worker stops at the next boundary)."""
    found = await conn.scalar(
        select(response_steers.c.id)
        .where(response_steers.c.response_id == response_id, response_steers.c.successor_id.is_(None))
        .limit(1)
    )
    return found is not None


async def taken_by(conn: AsyncConnection, steer_ids: Sequence[str], successor_id: str) -> None:
    """These steers' input went into `successor_id`."""
    await conn.execute(
        update(response_steers).where(response_steers.c.id.in_(list(steer_ids))).values(successor_id=successor_id)
    )

"""Idempotency keys (design invariant 4): what a create sent with an `Idempotency-Key` created,
so that the same request sent again answers with it instead of creating it again.

The key is claimed in the transaction that creates the resource: its row is locked until that
commits, so a duplicate sent meanwhile waits at its own claim and then finds what the first
created (a primary key, not a check-then-insert). A key older than KEY_HOURS is free again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

KEY_HOURS = 24

_CLAIM = text(f"""
    INSERT INTO idempotency_keys (account_id, key, fingerprint) VALUES (:account_id, :key, :fingerprint)
    ON CONFLICT (account_id, key) DO UPDATE
        SET fingerprint = excluded.fingerprint, resource_id = NULL, item_ids = NULL, created_at = now()
        WHERE idempotency_keys.created_at < now() - interval '{KEY_HOURS} hours'
    RETURNING 1
""")

_EARLIER = text("""
    SELECT fingerprint, resource_id, item_ids FROM idempotency_keys WHERE account_id = :account_id AND key = :key
""")


@dataclass(frozen=True, slots=True)
class Earlier:
    """What the key's first request was and created."""

    fingerprint: str
    resource_id: str | None
    item_ids: list[str] | None


async def earlier(conn: AsyncConnection, account_id: str, key: str) -> Earlier | None:
    """The live key's first request, as committed (None: no live key)."""
    row = (
        await conn.execute(
            text(f"{_EARLIER.text} AND created_at >= now() - interval '{KEY_HOURS} hours'"),
            {"account_id": account_id, "key": key},
        )
    ).one_or_none()
    return None if row is None else Earlier(row.fingerprint, row.resource_id, row.item_ids)


async def release(conn: AsyncConnection, account_id: str, key: str) -> None:
    await conn.execute(
        text("DELETE FROM idempotency_keys WHERE account_id = :account_id AND key = :key"),
        {"account_id": account_id, "key": key},
    )


async def claim(conn: AsyncConnection, account_id: str, key: str, fingerprint: str) -> Earlier | None:
    """Takes the key for this request (None), or, when a live one has it, what that created."""
    parameters = {"account_id": account_id, "key": key, "fingerprint": fingerprint}
    if (await conn.execute(_CLAIM, parameters)).first() is not None:
        return None
    row = (await conn.execute(_EARLIER, parameters)).one()
    return Earlier(row.fingerprint, row.resource_id, row.item_ids)


async def record(
    conn: AsyncConnection, account_id: str, key: str, resource_id: str, item_ids: Sequence[str] | None = None
) -> None:
    """What the request that claimed the key created (in the same transaction)."""
    await conn.execute(
        text(
            "UPDATE idempotency_keys SET resource_id = :resource_id, item_ids = :item_ids "
            "WHERE account_id = :account_id AND key = :key"
        ),
        {
            "account_id": account_id,
            "key": key,
            "resource_id": resource_id,
            "item_ids": None if item_ids is None else list(item_ids),
        },
    )

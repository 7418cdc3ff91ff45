"""`Idempotency-Key` on the POSTs that create something: the same key from the same account
within 24 hours answers with what the first request created, never creating it twice; the same
key with another request is a 409 naming the header. Without the header nothing changes.

A request's fingerprint is its route and its body as JSON with sorted keys, so the same request
serialized differently is still the same.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app import errors
from app.storage import idempotency as idempotency_db

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    key: str
    fingerprint: str

    @classmethod
    def of(cls, key: str | None, route: str, body: dict[str, Any]) -> IdempotencyKey | None:
        """The request's key, checked (a 400 naming the header), or None without one."""
        if key is None:
            return None
        if not 0 < len(key) <= MAX_KEY_CHARS or not key.isprintable() or not key.isascii():
            raise errors.InvalidRequest(
                f"Invalid '{HEADER}': expected 1 to {MAX_KEY_CHARS} printable ASCII characters.",
                param=HEADER,
                code="invalid_value",
            )
        canonical = json.dumps([route, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return cls(key, hashlib.sha256(canonical.encode()).hexdigest())


class Replay(Exception):
    """The key's first request created this: answer with it."""

    def __init__(self, earlier: idempotency_db.Earlier) -> None:
        super().__init__(earlier.resource_id)
        self.resource_id = earlier.resource_id or ""
        self.item_ids = earlier.item_ids or []


async def check(conn: AsyncConnection, account_id: str, key: IdempotencyKey) -> None:
    """Before anything is counted or stored: Replay (or the 409) when a live key has answered
    already. The claim in the creating transaction stays the one that decides."""
    earlier = await idempotency_db.earlier(conn, account_id, key.key)
    if earlier is not None and earlier.resource_id is not None:
        _settle(key, earlier)


def _settle(key: IdempotencyKey, earlier: idempotency_db.Earlier) -> None:
    if earlier.fingerprint != key.fingerprint:
        raise errors.Conflict(
            f"This {HEADER} was used with another request within the last {idempotency_db.KEY_HOURS} hours; "
            "use a new key for a new request.",
            param=HEADER,
            code="idempotency_key_reused",
        )
    raise Replay(earlier)


async def claim(conn: AsyncConnection, account_id: str, key: IdempotencyKey | None) -> None:
    """Takes the key for this request, in the transaction that creates what it asks; raises
    Replay when the same request came first, or a 409 when another one used the key."""
    if key is None:
        return
    earlier = await idempotency_db.claim(conn, account_id, key.key, key.fingerprint)
    if earlier is not None:
        _settle(key, earlier)


async def record(
    conn: AsyncConnection,
    account_id: str,
    key: IdempotencyKey | None,
    resource_id: str,
    item_ids: list[str] | None = None,
) -> None:
    if key is not None:
        await idempotency_db.record(conn, account_id, key.key, resource_id, item_ids)


async def release(conn: AsyncConnection, account_id: str, key: IdempotencyKey | None) -> None:
    """Frees the key of a create that was withdrawn: what it would answer with is gone."""
    if key is not None:
        await idempotency_db.release(conn, account_id, key.key)

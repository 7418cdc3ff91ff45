"""Accounts and their API keys. Keys are stored only as SHA-256 hashes (design invariant 5)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.storage.driver import DriverStatement
from app.storage.tables import accounts, api_keys

KEY_PREFIX = "sk-rs-"


@dataclass(frozen=True, slots=True)
class Limits:
    """An account's admission limits (app/service/admission.py); None: unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None  # stored or background responses queued or running at once

    @property
    def any(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: str
    account: str
    display_prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class AccountInfo:
    id: str
    name: str
    created_at: datetime
    disabled_at: datetime | None
    live_keys: int
    limits: Limits


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def ensure_account(conn: AsyncConnection, name: str) -> str:
    stmt = pg_insert(accounts).values(id=new_id("acct"), name=name)
    stmt = stmt.on_conflict_do_update(index_elements=[accounts.c.name], set_={"name": stmt.excluded.name})
    return str((await conn.execute(stmt.returning(accounts.c.id))).scalar_one())


async def account_id(conn: AsyncConnection, name: str) -> str | None:
    found = await conn.scalar(select(accounts.c.id).where(accounts.c.name == name))
    return None if found is None else str(found)


async def create_key(conn: AsyncConnection, account_name: str) -> tuple[KeyInfo, str]:
    """Returns the key's info and the key itself, which is shown once and never stored."""
    account_id = await ensure_account(conn, account_name)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = (
        await conn.execute(
            insert(api_keys)
            .values(id=new_id("key"), account_id=account_id, key_hash=hash_key(key), display_prefix=key[:12])
            .returning(api_keys)
        )
    ).one()
    return KeyInfo(row.id, account_name, row.display_prefix, row.created_at, None, None), key


async def list_keys(conn: AsyncConnection) -> list[KeyInfo]:
    rows = await conn.execute(
        select(api_keys, accounts.c.name.label("account"))
        .join(accounts, accounts.c.id == api_keys.c.account_id)
        .order_by(api_keys.c.created_at)
    )
    return [KeyInfo(r.id, r.account, r.display_prefix, r.created_at, r.last_used_at, r.revoked_at) for r in rows]


async def revoke_key(conn: AsyncConnection, key_id_or_prefix: str, account_id: str | None = None) -> int:
    """Revokes the key with this id or display prefix (of this account, if given); returns how
    many keys it revoked."""
    query = (
        update(api_keys)
        .where((api_keys.c.id == key_id_or_prefix) | (api_keys.c.display_prefix == key_id_or_prefix))
        .where(api_keys.c.revoked_at.is_(None))
    )
    if account_id is not None:
        query = query.where(api_keys.c.account_id == account_id)
    return (await conn.execute(query.values(revoked_at=func.now()))).rowcount


async def list_accounts(conn: AsyncConnection) -> list[AccountInfo]:
    live_keys = (
        select(func.count())
        .where(api_keys.c.account_id == accounts.c.id, api_keys.c.revoked_at.is_(None))
        .scalar_subquery()
    )
    rows = await conn.execute(select(accounts, live_keys.label("live_keys")).order_by(accounts.c.name))
    return [
        AccountInfo(
            r.id,
            r.name,
            r.created_at,
            r.disabled_at,
            r.live_keys,
            Limits(r.requests_per_minute, r.tokens_per_minute, r.max_concurrent),
        )
        for r in rows
    ]


async def set_disabled(conn: AsyncConnection, name: str, disabled: bool) -> bool:
    """Disables (or enables again) the account of this name; False if there is none."""
    result = await conn.execute(
        update(accounts).where(accounts.c.name == name).values(disabled_at=func.now() if disabled else None)
    )
    return result.rowcount > 0


async def account_for_key(conn: AsyncConnection, key: str) -> str | None:
    """The account id of a live key, or None."""
    key_hash = hash_key(key)
    caller = (await accounts_for_hashes(conn, [key_hash])).get(key_hash)
    return None if caller is None else caller.account_id


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a live key lets in, and within which limits."""

    account_id: str
    limits: Limits


async def accounts_for_hashes(conn: AsyncConnection, key_hashes: Sequence[str]) -> dict[str, Caller]:
    """The account (and its limits) of each live key among these hashes; one statement, which
    also touches last_used_at (at most once a minute, so a busy key does not rewrite its row on
    every request)."""
    rows = await _ACCOUNTS_FOR_HASHES.rows(conn, {"key_hashes": list(key_hashes)})
    return {key_hash: Caller(str(account), Limits(*limits)) for key_hash, account, *limits in rows}


async def set_limits(conn: AsyncConnection, name: str, limits: Limits) -> bool:
    """Sets an account's limits (None: no limit); False if there is no such account."""
    result = await conn.execute(
        update(accounts)
        .where(accounts.c.name == name)
        .values(
            requests_per_minute=limits.requests_per_minute,
            tokens_per_minute=limits.tokens_per_minute,
            max_concurrent=limits.max_concurrent,
        )
    )
    return result.rowcount > 0


_ACCOUNTS_FOR_HASHES = DriverStatement(
    text("""
    WITH live AS (
        SELECT k.id, k.key_hash, k.account_id, k.last_used_at, a.requests_per_minute, a.tokens_per_minute,
               a.max_concurrent
        FROM api_keys k JOIN accounts a ON a.id = k.account_id
        WHERE k.key_hash = ANY(CAST(:key_hashes AS text[])) AND k.revoked_at IS NULL AND a.disabled_at IS NULL
    ), touched AS (
        UPDATE api_keys SET last_used_at = now() FROM live
        WHERE api_keys.id = live.id AND (live.last_used_at IS NULL OR live.last_used_at < now() - interval '1 minute')
    )
    SELECT key_hash, account_id, requests_per_minute, tokens_per_minute, max_concurrent FROM live
""")
)

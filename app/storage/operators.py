"""The console's operators: their keys (made by the command line, stored only as SHA-256 hashes,
as accounts' are) and their browser sessions (by the hash of the session cookie). An operator
sees every account; an account's key never opens the console, nor an operator's the API."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.ids import new_id
from app.storage.accounts import hash_key
from app.storage.tables import console_sessions, operator_keys

KEY_PREFIX = "rs-op-"


@dataclass(frozen=True, slots=True)
class OperatorKey:
    id: str
    name: str
    display_prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class Session:
    operator: str  # the key's name
    csrf_token: str


async def create_key(conn: AsyncConnection, name: str) -> tuple[OperatorKey, str] | None:
    """The key's info and the key itself, shown once and never stored; None if the name is taken."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = (
        await conn.execute(
            pg_insert(operator_keys)
            .values(id=new_id("opk"), name=name, key_hash=hash_key(key), display_prefix=key[:12])
            .on_conflict_do_nothing(
                index_elements=[operator_keys.c.name], index_where=operator_keys.c.revoked_at.is_(None)
            )
            .returning(operator_keys)
        )
    ).one_or_none()
    return None if row is None else (_key(row), key)


async def list_keys(conn: AsyncConnection) -> list[OperatorKey]:
    return [_key(row) for row in await conn.execute(select(operator_keys).order_by(operator_keys.c.created_at))]


async def revoke_key(conn: AsyncConnection, id_or_name: str) -> int:
    """Revokes the key with this id or name, and ends its sessions; how many keys it revoked."""
    revoked = await conn.execute(
        update(operator_keys)
        .where((operator_keys.c.id == id_or_name) | (operator_keys.c.name == id_or_name))
        .where(operator_keys.c.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(operator_keys.c.id)
    )
    ids = list(revoked.scalars())
    if ids:
        await conn.execute(delete(console_sessions).where(console_sessions.c.operator_key_id.in_(ids)))
    return len(ids)


async def is_live(conn: AsyncConnection, key: str) -> bool:
    query = select(operator_keys.c.id).where(operator_keys.c.key_hash == hash_key(key))
    return await conn.scalar(query.where(operator_keys.c.revoked_at.is_(None))) is not None


async def open_session(conn: AsyncConnection, key: str, lifetime: timedelta) -> tuple[str, Session] | None:
    """A session for this key (its cookie and what it holds), or None for a key that is no live
    operator key."""
    found = (
        await conn.execute(
            update(operator_keys)
            .where(operator_keys.c.key_hash == hash_key(key), operator_keys.c.revoked_at.is_(None))
            .values(last_used_at=func.now())
            .returning(operator_keys.c.id, operator_keys.c.name)
        )
    ).one_or_none()
    if found is None:
        return None
    cookie, csrf_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    await conn.execute(
        insert(console_sessions).values(
            id=hash_key(cookie),
            operator_key_id=found.id,
            csrf_token=csrf_token,
            expires_at=func.now() + lifetime,
        )
    )
    return cookie, Session(found.name, csrf_token)


async def session(conn: AsyncConnection, cookie: str) -> Session | None:
    """The live session of this cookie: not expired, its key not revoked."""
    row = (
        await conn.execute(
            select(operator_keys.c.name, console_sessions.c.csrf_token)
            .join(operator_keys, operator_keys.c.id == console_sessions.c.operator_key_id)
            .where(console_sessions.c.id == hash_key(cookie))
            .where(console_sessions.c.expires_at > func.now(), operator_keys.c.revoked_at.is_(None))
        )
    ).one_or_none()
    return None if row is None else Session(row.name, row.csrf_token)


async def close_session(conn: AsyncConnection, cookie: str) -> None:
    await conn.execute(delete(console_sessions).where(console_sessions.c.id == hash_key(cookie)))
    # (expired sessions of every operator go with any logout: they are few)
    await conn.execute(delete(console_sessions).where(console_sessions.c.expires_at <= func.now()))


def _key(row: Row[Any]) -> OperatorKey:
    return OperatorKey(row.id, row.name, row.display_prefix, row.created_at, row.last_used_at, row.revoked_at)

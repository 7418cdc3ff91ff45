"""An API process keeps the callers of the keys it saw (app/service/known_keys.py), and Postgres
tells it when any changes (migration 0022): a key revoked, an account disabled or limited by
another process is refused, or limited, from the notice on; and a process that lost its
listening connection keeps nothing until it listens again, so a change it could not hear is
still seen at once."""

from __future__ import annotations

import asyncio
import secrets

from sqlalchemy import text

from app.service.state import AppState
from app.storage import accounts as accounts_db
from app.storage.accounts import Limits
from tests.conftest import within


async def new_key(state: AppState) -> tuple[str, str, str]:
    """A new account's name, and its key's id and hash."""
    name = f"known-{secrets.token_hex(3)}"
    async with state.engine.begin() as conn:
        info, key = await accounts_db.create_key(conn, name)
    return name, info.id, accounts_db.hash_key(key)


async def until_listening(state: AppState) -> None:
    while not state.known_keys.listening:
        await asyncio.sleep(0.01)


async def until_refused(state: AppState, key_hash: str) -> None:
    while await state.authenticate(key_hash) is not None:
        await asyncio.sleep(0.01)


async def test_a_key_revoked_by_another_process_is_refused_once_postgres_says_so(state: AppState) -> None:
    await within(until_listening(state), 10)
    _, key_id, key_hash = await new_key(state)
    assert await state.authenticate(key_hash) is not None  # kept from now on
    async with state.engine.begin() as conn:
        assert await accounts_db.revoke_key(conn, key_id) == 1
    await within(until_refused(state, key_hash), 5)


async def test_an_account_disabled_or_limited_elsewhere_is_seen_once_postgres_says_so(state: AppState) -> None:
    await within(until_listening(state), 10)
    name, _, key_hash = await new_key(state)
    caller = await state.authenticate(key_hash)
    assert caller is not None and caller.limits == Limits(None, None, None)
    async with state.engine.begin() as conn:
        await accounts_db.set_limits(conn, name, Limits(5, None, None))

    async def until_limited() -> None:
        while (caller := await state.authenticate(key_hash)) is None or caller.limits.requests_per_minute != 5:
            await asyncio.sleep(0.01)

    await within(until_limited(), 5)
    async with state.engine.begin() as conn:
        await accounts_db.set_disabled(conn, name, True)
    await within(until_refused(state, key_hash), 5)


async def test_a_process_that_stopped_listening_keeps_nothing_until_it_listens_again(state: AppState) -> None:
    await within(until_listening(state), 10)
    _, _, key_hash = await new_key(state)
    assert await state.authenticate(key_hash) is not None  # kept
    listeners = "FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND datname = current_database()"
    async with state.engine.connect() as conn:
        assert await conn.scalar(text(f"SELECT count(pg_terminate_backend(pid)) {listeners}"))

    async def until_deaf() -> None:
        while state.known_keys.listening:
            await asyncio.sleep(0.01)

    await within(until_deaf(), 5)
    # A revocation this process cannot hear of (no notice: triggers off for this transaction).
    async with state.engine.begin() as conn:
        await conn.execute(text("SET LOCAL session_replication_role = replica"))
        await conn.execute(text("UPDATE api_keys SET revoked_at = now() WHERE key_hash = :h"), {"h": key_hash})
    assert await state.authenticate(key_hash) is None  # looked up, not kept
    await within(until_listening(state), 10)  # and it listens again

"""Compaction needs the key that seals its summary: without one it is refused, storing nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app import errors
from app.service import compaction, creation
from app.service.state import AppState
from app.storage.accounts import Caller, Limits
from app.storage.tables import responses


async def test_without_an_encryption_key_compaction_is_a_400_and_stores_nothing(
    state: AppState, account_id: str
) -> None:
    assert state.seal is None  # (the integration settings have no key)
    async with state.engine.connect() as conn:
        before = await conn.scalar(select(func.count()).select_from(responses))
    with pytest.raises(errors.InvalidRequest) as caught:
        await compaction.compact(state, Caller(account_id, Limits()), {"model": "fake", "input": "hi"}, 40)
    assert caught.value.body()["error"]["code"] == "compaction_unavailable"
    async with state.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(responses)) == before


async def test_without_an_encryption_key_context_management_is_a_400_naming_it(
    state: AppState, account_id: str
) -> None:
    body = {"model": "fake", "input": "hi", "context_management": [{"type": "compaction"}]}
    with pytest.raises(errors.InvalidRequest) as caught:
        await creation.accept(state, account_id, body)
    error = caught.value.body()["error"]
    assert (error["param"], error["code"]) == ("context_management", "compaction_unavailable")

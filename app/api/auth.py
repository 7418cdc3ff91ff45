"""Bearer-key authentication: every /v1 request resolves to one account (design invariant 5)."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from app import errors
from app.process import request_log
from app.service.state import AppState
from app.storage import accounts as accounts_db


async def authenticate(state: AppState, request: HTTPConnection) -> accounts_db.Caller:
    """The caller (its account and that account's limits), or a 401."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise errors.AuthenticationFailed(
            "You didn't provide an API key. Provide it in an Authorization header using Bearer auth "
            "(Authorization: Bearer YOUR_KEY).",
            code="missing_api_key",
        )
    caller = await state.authenticate(accounts_db.hash_key(key))
    if caller is None:
        masked = f"{key[:6]}***{key[-4:]}" if len(key) > 12 else "***"
        raise errors.AuthenticationFailed(f"Incorrect API key provided: {masked}.")
    request_log.note(account=caller.account_id)
    return caller

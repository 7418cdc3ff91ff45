"""The accounts: every one with its live keys and active responses, and one account (its keys,
revoked here; its tokens per day; its active and latest responses; its creates refused)."""

from __future__ import annotations

from datetime import date, timedelta

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app import errors
from app.console import guard
from app.console.charts import bar_chart
from app.console.guard import Forbidden, checked_form, session_of, state_of
from app.console.rendering import TEMPLATES, page, path_id
from app.protocol.vocabulary import ACTIVE_STATUSES
from app.queue import rate_counters
from app.queue.redis_link import REDIS_DOWN
from app.storage import accounts as accounts_db
from app.storage import console as console_db
from app.storage.console import ResponseFilters

USAGE_DAYS = 30
LATEST = 20


@page
async def accounts_list(request: Request) -> Response:
    session = await session_of(request)
    async with state_of(request).engine.connect() as conn:
        listed = await accounts_db.list_accounts(conn)
        active = await console_db.active_by_account(conn)
    context = {"session": session, "accounts": listed, "active": active}
    return TEMPLATES.TemplateResponse(request, "accounts.html", context)


@page
async def account_page(request: Request) -> Response:
    session, state = await session_of(request), state_of(request)
    account_id = path_id(request, "account_id")
    async with state.engine.connect() as conn:
        account = await console_db.account_row(conn, account_id)
        if account is None:
            raise errors.NotFound(f"No account with id '{account_id}'.")
        keys = await console_db.account_keys(conn, account_id)
        usage = await console_db.usage_by_day(conn, account_id, USAGE_DAYS)
        active = [
            listed
            for status in ACTIVE_STATUSES
            for listed in (await console_db.list_responses(conn, ResponseFilters(account_id, status=status), LATEST))[0]
        ]
        latest, _ = await console_db.list_responses(conn, ResponseFilters(account_id), LATEST)
    try:
        refused = await rate_counters.refusals_by_day(state.redis, account_id)
    except REDIS_DOWN:
        refused = None
    context = {
        "session": session,
        "account": account,
        "keys": keys,
        "usage": usage,
        "tokens_chart": bar_chart(
            f"Tokens per day, the last {USAGE_DAYS} (UTC)",
            [(day.day.isoformat(), day.input_tokens + day.output_tokens) for day in usage],
            "tokens",
        ),
        "active": active,
        "latest": latest,
        "refused": [(date(1970, 1, 1) + timedelta(days=day), count) for day, count in refused or []],
        "refusals_known": refused is not None,
    }
    return TEMPLATES.TemplateResponse(request, "account.html", context)


@page
async def revoke_key(request: Request) -> Response:
    await checked_form(request, await session_of(request))
    account_id, key_id = path_id(request, "account_id"), path_id(request, "key_id")
    async with state_of(request).engine.begin() as conn:
        if await accounts_db.revoke_key(conn, key_id, account_id) == 0:
            raise Forbidden("That key is not a live key of this account.")
    return RedirectResponse(f"{guard.PATH}/accounts/{account_id}", status_code=303)

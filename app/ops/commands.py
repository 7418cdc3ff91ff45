"""The operator's commands (`responses-server keys|accounts|limits|webhooks|operators|status`): each
opens what it needs, does one thing, prints what it did, and answers the exit status."""

from __future__ import annotations

import argparse
import sys

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.ops import status
from app.process.egress import EgressGuard, EgressRefused
from app.queue import redis_servers
from app.settings import Settings
from app.storage import accounts as accounts_db
from app.storage import operators as operators_db
from app.storage import webhooks as webhooks_db
from app.storage.accounts import Limits
from app.storage.engine import create_engine


async def run(settings: Settings, args: argparse.Namespace) -> int:
    engine = create_engine(settings)
    try:
        if args.command == "keys":
            return await _keys(engine, args)
        if args.command == "accounts":
            return await _accounts(engine, args)
        if args.command == "limits":
            return await _limits(engine, args)
        if args.command == "webhooks":
            return await _webhooks(engine, settings, args)
        if args.command == "operators":
            return await _operators(engine, args)
        redis = redis_servers.client(settings.redis_url)
        try:
            print(await status.report(engine, redis))
        finally:
            await redis.aclose()
        return 0
    finally:
        await engine.dispose()


async def _keys(engine: AsyncEngine, args: argparse.Namespace) -> int:
    async with engine.begin() as conn:
        if args.keys_command == "create":
            info, key = await accounts_db.create_key(conn, args.account)
            print(f"created key {info.id} ({info.display_prefix}…) for account {args.account}")
            print(key)
        elif args.keys_command == "list":
            for k in await accounts_db.list_keys(conn):
                state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
                used = f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never"
                print(
                    f"{k.id}  {k.display_prefix}…  account={k.account}  created={k.created_at:%Y-%m-%d %H:%M}"
                    f"  last_used={used}  {state}"
                )
        elif await accounts_db.revoke_key(conn, args.key) == 0:
            print(f"no active key with id or prefix {args.key!r}", file=sys.stderr)
            return 1
        else:
            print(f"revoked {args.key}")
    return 0


async def _operators(engine: AsyncEngine, args: argparse.Namespace) -> int:
    async with engine.begin() as conn:
        if args.operators_command == "create":
            made = await operators_db.create_key(conn, args.name)
            if made is None:
                print(f"an operator named {args.name!r} has a live key already (revoke it first)", file=sys.stderr)
                return 1
            info, key = made
            print(f"created operator key {info.id} ({info.display_prefix}…) for {info.name}")
            print(key)
        elif args.operators_command == "list":
            for k in await operators_db.list_keys(conn):
                state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
                used = f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never"
                created = f"{k.created_at:%Y-%m-%d %H:%M}"
                print(f"{k.id}  {k.display_prefix}…  {k.name}  created={created}  last_used={used}  {state}")
        elif await operators_db.revoke_key(conn, args.key) == 0:
            print(f"no active operator key with id or name {args.key!r}", file=sys.stderr)
            return 1
        else:
            print(f"revoked {args.key}")
    return 0


async def _accounts(engine: AsyncEngine, args: argparse.Namespace) -> int:
    async with engine.begin() as conn:
        if args.accounts_command == "create":
            print(f"account {args.name}: {await accounts_db.ensure_account(conn, args.name)}")
        elif args.accounts_command == "list":
            for a in await accounts_db.list_accounts(conn):
                state = f"disabled {a.disabled_at:%Y-%m-%d %H:%M}" if a.disabled_at else "active"
                print(f"{a.name}  {a.id}  created={a.created_at:%Y-%m-%d %H:%M}  live_keys={a.live_keys}  {state}")
        elif not await accounts_db.set_disabled(conn, args.name, args.accounts_command == "disable"):
            print(f"no account named {args.name!r}", file=sys.stderr)
            return 1
        else:
            print(f"{args.accounts_command}d {args.name}")
    return 0


async def _webhooks(engine: AsyncEngine, settings: Settings, args: argparse.Namespace) -> int:
    async with engine.begin() as conn:
        if args.webhooks_command == "add":
            account = await accounts_db.account_id(conn, args.account)
            if account is None:
                print(f"no account named {args.account!r}", file=sys.stderr)
                return 1
            events = [event.strip() for event in args.events.split(",") if event.strip()]
            problem = await _endpoint_problem(args.url, events, settings)
            if problem is not None:
                print(problem, file=sys.stderr)
                return 1
            endpoint, secret = await webhooks_db.add_endpoint(conn, account, args.url, events)
            print(f"added webhook endpoint {endpoint} for account {args.account}: {args.url} ({', '.join(events)})")
            print(secret)
        elif args.webhooks_command == "list":
            for e in await webhooks_db.list_endpoints(conn, args.account):
                created = f"{e.created_at:%Y-%m-%d %H:%M}"
                print(f"{e.id}  account={e.account}  {e.url}  events={','.join(e.events)}  created={created}")
        elif args.webhooks_command == "remove":
            if not await webhooks_db.remove_endpoint(conn, args.endpoint):
                print(f"no webhook endpoint {args.endpoint!r}", file=sys.stderr)
                return 1
            print(f"removed {args.endpoint}")
        else:
            rotated = await webhooks_db.rotate_secret(conn, args.endpoint)
            if rotated is None:
                print(f"no webhook endpoint {args.endpoint!r}", file=sys.stderr)
                return 1
            print(f"rotated the secret of {args.endpoint}; the previous one signs beside it for a day")
            print(rotated)
    return 0


async def _endpoint_problem(url: str, events: list[str], settings: Settings) -> str | None:
    """Why an endpoint cannot be added, if it cannot: an unknown event type, or a URL the egress
    guard would not connect to now (checked again at every delivery)."""
    unknown = [event for event in events if event not in webhooks_db.EVENT_TYPES]
    if unknown or not events:
        return f"unknown event types {unknown}: choose among {', '.join(webhooks_db.EVENT_TYPES)}"
    try:
        async with httpx.AsyncClient() as client:
            await EgressGuard.from_config(settings.webhook_allow).request(client, "POST", url, {})
    except EgressRefused as refused:
        return f"{url} would not be delivered to: {refused} (RESPONSES_WEBHOOK_ALLOW names networks to allow)"
    return None


async def _limits(engine: AsyncEngine, args: argparse.Namespace) -> int:
    async with engine.begin() as conn:
        accounts = {a.name: a for a in await accounts_db.list_accounts(conn)}
        if args.limits_command == "show":
            for a in accounts.values():
                print(f"{a.name}  {_limit_text(a.limits)}")
            return 0
        account = accounts.get(args.name)
        if account is None:
            print(f"no account named {args.name!r}", file=sys.stderr)
            return 1
        given = (args.requests_per_minute, args.tokens_per_minute, args.concurrent)
        kept = (account.limits.requests_per_minute, account.limits.tokens_per_minute, account.limits.max_concurrent)
        limits = Limits(
            *(None if new == 0 else old if new is None else new for new, old in zip(given, kept, strict=True))
        )
        await accounts_db.set_limits(conn, args.name, limits)
        print(f"{args.name}  {_limit_text(limits)}")
    return 0


def _limit_text(limits: Limits) -> str:
    requests = limits.requests_per_minute or "unlimited"
    tokens = limits.tokens_per_minute or "unlimited"
    concurrent = limits.max_concurrent or "unlimited"
    return f"requests_per_minute={requests}  tokens_per_minute={tokens}  concurrent={concurrent}"

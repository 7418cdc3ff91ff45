"""`responses-server`: migrate, run the API or a worker, manage API keys."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from app import request_log
from app.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="responses-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="create or upgrade the database schema (alembic upgrade head)")
    api = commands.add_parser("api", help="serve the HTTP API with uvicorn")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    worker = commands.add_parser("worker", help="run a generation worker (arq)")
    worker.add_argument(
        "--model",
        help="host this catalog model (runtime vllm or llamacpp): start its server and take its jobs; "
        "without it, the worker serves every model of runtime openai",
    )
    dev = commands.add_parser(
        "dev", help="run everything locally: embedded PostgreSQL, Valkey and CPU model, migrations, API, workers"
    )
    dev.add_argument("--data", type=Path, default=Path("~/.responses-server"), help="data folder (%(default)s)")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    probe = commands.add_parser(
        "probe", help="exit 0 if this machine's API or worker port answers 200 (a container's healthcheck)"
    )
    probe.add_argument("--port", type=int, default=8000)
    probe.add_argument("--path", default="/ready", help="/ready (default) or /health")
    probe.add_argument("--timeout", type=float, default=3.0)
    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="create a key (and its account if new); prints the key last")
    create.add_argument("--account", required=True)
    keys.add_parser("list", help="list keys (prefixes only; keys are stored hashed)")
    revoke = keys.add_parser("revoke", help="revoke a key by id or display prefix")
    revoke.add_argument("key")

    args = parser.parse_args(argv)
    if args.command == "probe":
        sys.exit(_probe(args.port, args.path, args.timeout))
    if args.command == "dev":
        from app import local_stack

        request_log.configure("text")
        sys.exit(local_stack.run(args.data, args.host, args.port))
    settings = Settings()
    request_log.configure(settings.log_format)
    if args.command == "migrate":
        from app.db.migrate import migrate

        migrate(settings)
    elif args.command == "api":
        _serve_api(args.host, args.port, args.workers)
    elif args.command == "worker":
        _run_worker(settings, args.model)
    else:
        sys.exit(asyncio.run(_keys(settings, args)))


def _probe(port: int, path: str, timeout: float) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            print(answer.read().decode())
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{exc.code}: {exc.read().decode()}", file=sys.stderr)
    except OSError as exc:
        print(f"no answer: {exc}", file=sys.stderr)
    return 1


def _serve_api(host: str, port: int, workers: int) -> None:
    import uvicorn

    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        proxy_headers=True,
        log_level="info",
        log_config=None,  # uvicorn's loggers go through ours (text or JSON)
        access_log=False,  # each request's line is ours (app/request_log.py), with what it was about
    )


def _run_worker(settings: Settings, hosted_model: str | None) -> None:
    import uvloop

    from app.catalog import CatalogError
    from workers.launch import LaunchError
    from workers.runtime_errors import RuntimeFailure
    from workers.worker_process import build_worker

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        build_worker(settings, hosted_model).run()
    except (CatalogError, LaunchError, RuntimeFailure) as exc:  # RuntimeFailure: its model server did not start
        sys.exit(f"responses-server worker: {exc}")


async def _keys(settings: Settings, args: argparse.Namespace) -> int:
    from app.db import accounts as accounts_db
    from app.db.engine import create_engine

    engine = create_engine(settings)
    try:
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
    finally:
        await engine.dispose()
    return 0


if __name__ == "__main__":
    main()

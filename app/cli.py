"""`responses-server`: migrate, run the API or a worker, manage API keys, accounts, webhooks and operators."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from app.process import request_log
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
    accounts = commands.add_parser("accounts", help="manage accounts").add_subparsers(
        dest="accounts_command", required=True
    )
    accounts.add_parser("create", help="create an account (keys: `keys create`)").add_argument("name")
    accounts.add_parser("list", help="list accounts with their live keys")
    accounts.add_parser("disable", help="refuse every key of an account from now on").add_argument("name")
    accounts.add_parser("enable", help="let a disabled account's keys in again").add_argument("name")
    limits = commands.add_parser("limits", help="accounts' requests and tokens per minute").add_subparsers(
        dest="limits_command", required=True
    )
    limit = limits.add_parser("set", help="set an account's limits (0: none); the others stay as they are")
    limit.add_argument("name")
    limit.add_argument("--requests-per-minute", type=int)
    limit.add_argument("--tokens-per-minute", type=int)
    limit.add_argument("--concurrent", type=int, help="stored or background responses queued or running at once")
    limits.add_parser("show", help="every account's limits")
    webhooks = commands.add_parser("webhooks", help="accounts' webhook endpoints").add_subparsers(
        dest="webhooks_command", required=True
    )
    add = webhooks.add_parser("add", help="add an endpoint to an account; prints its signing secret last, once")
    add.add_argument("account")
    add.add_argument("url")
    add.add_argument(
        "--events",
        default="response.completed,response.failed,response.cancelled,response.incomplete",
        help="comma-separated event types (default: all four)",
    )
    webhooks.add_parser("list", help="list endpoints (an account's, or all)").add_argument("account", nargs="?")
    webhooks.add_parser("remove", help="remove an endpoint and its pending deliveries").add_argument("endpoint")
    webhooks.add_parser(
        "rotate", help="give an endpoint a new secret (printed once); the old one signs beside it for a day"
    ).add_argument("endpoint")
    operators = commands.add_parser("operators", help="keys of the operator's console").add_subparsers(
        dest="operators_command", required=True
    )
    operators.add_parser("create", help="create an operator's key; prints the key last, once").add_argument("name")
    operators.add_parser("list", help="list operators' keys (prefixes only)")
    operators.add_parser("revoke", help="revoke an operator's key by id or name; ends its sessions").add_argument("key")
    commands.add_parser("status", help="the queue of each model and the workers alive")
    commands.add_parser("gc", help="apply retention now, until nothing due is left, and say what it removed")

    args = parser.parse_args(argv)
    if args.command == "probe":
        sys.exit(_probe(args.port, args.path, args.timeout))
    if args.command == "dev":
        from app.ops import local_stack

        request_log.configure("text")
        sys.exit(local_stack.run(args.data, args.host, args.port))
    settings = Settings()
    request_log.configure(settings.log_format)
    if args.command == "migrate":
        from app.storage.migrate import migrate

        migrate(settings)
    elif args.command == "api":
        _serve_api(args.host, args.port, args.workers, settings)
    elif args.command == "worker":
        _run_worker(settings, args.model)
    elif args.command == "gc":
        sys.exit(asyncio.run(_gc(settings)))
    else:
        from app.ops import commands as operator_commands

        sys.exit(asyncio.run(operator_commands.run(settings, args)))


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


def _serve_api(host: str, port: int, workers: int, settings: Settings) -> None:
    import uvicorn

    from app.process import api_server

    config = uvicorn.Config(
        "app.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        proxy_headers=True,
        # The stdlib loop, not uvloop: under load (thousands of streams written to), uvloop
        # accepted new connections at about ten a second while its accept queue held hundreds,
        # so a burst of followers waited up to 15 s for its answer (bench/follower_burst_benchmark.py:
        # p99 14.7 s against 1.4 s). The API's CPU per token is the same with either
        # (bench/stream_benchmark.py, 256 streams: 1.40 against 1.36 s). Workers keep uvloop.
        loop="asyncio",
        log_level="info",
        log_config=None,  # uvicorn's loggers go through ours (text or JSON)
        access_log=False,  # each request's line is ours (app/process/request_log.py), with what it was about
        ws_max_size=settings.websocket_max_message_bytes,
    )
    api_server.serve(config)


def _run_worker(settings: Settings, hosted_model: str | None) -> None:
    import uvloop

    from app.catalog import CatalogError
    from workers.runtime_failure import RuntimeFailure
    from workers.runtimes.launch import LaunchError
    from workers.worker import build_worker

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        build_worker(settings, hosted_model).run()
    except (CatalogError, LaunchError, RuntimeFailure) as exc:  # RuntimeFailure: its model server did not start
        sys.exit(f"responses-server worker: {exc}")


async def _gc(settings: Settings) -> int:
    from app.housekeeping import retention
    from app.storage.engine import create_engine

    engine = create_engine(settings)
    try:
        report = await retention.apply(engine, retention.RetentionPolicy.from_settings(settings), report_every=10)
    finally:
        await engine.dispose()
    print(f"removed {report.removed} in {report.seconds} s; behind by {report.behind_seconds or 'nothing'}")
    return 0


if __name__ == "__main__":
    main()

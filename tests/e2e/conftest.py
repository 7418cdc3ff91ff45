from __future__ import annotations

from collections.abc import Callable, Iterator

import openai
import pytest

from app.storage.migrate import migrate
from tests.conftest import Environment, PostgresServer, Server, new_environment
from tests.e2e.processes import PrivateRedis, Stack
from tests.mcp_server import McpTestServer
from tests.private_postgres import private_cluster

Restart = Callable[..., None]


@pytest.fixture
def client(server: Server, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def other_client(server: Server, other_api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=other_api_key, max_retries=0, timeout=30)


@pytest.fixture
def database_of_its_own(tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str) -> Iterator[Environment]:
    """An environment with a database of the test's own. A test whose workers are killed needs
    one: the session's server shares the session's database but not its queue name, so its reaper
    could take up the dead worker's response first, and clean its job up in (and continue it
    on) the session's queue instead of the test's (one deployment, one queue namespace, never
    meets this)."""
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        yield environment


@pytest.fixture
def vector_database_of_its_own(
    tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str, pgvector_postgres: PostgresServer
) -> Iterator[Environment]:
    """As `database_of_its_own`, on the PostgreSQL with pgvector: for killing workers that search."""
    with new_environment(tmp_path_factory, fake_runtime_url, pgvector_postgres) as environment:
        yield environment


@pytest.fixture
def mcp_server() -> Iterator[McpTestServer]:
    server = McpTestServer().start()
    yield server
    server.stop()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    server.close()


@pytest.fixture
def private_postgres(environment: Environment) -> Iterator[tuple[Environment, Restart]]:
    """The test's environment on a PostgreSQL cluster of its own, migrated (the shared one is
    never restarted), and a function that restarts that cluster (running `while_down` between its
    stop and its start)."""
    with private_cluster() as cluster:
        cluster.create_database("responses")
        database_url = cluster.url("responses", driver="postgresql+asyncpg")
        own = Environment(database_url, environment.redis_url, environment.queue_name, environment.models_path)
        migrate(own.settings())
        yield own, cluster.restart


@pytest.fixture
def restartable_stack(private_postgres: tuple[Environment, Restart]) -> Iterator[tuple[Stack, Restart]]:
    """A stack on the test's own Postgres cluster, and the function that restarts that cluster."""
    own, restart = private_postgres
    stack = Stack(own)
    yield stack, restart
    stack.close()

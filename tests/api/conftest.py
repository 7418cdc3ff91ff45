"""The fast layer: the API application served in this process by Starlette's TestClient (no
socket, no subprocess) with a worker on the same event loop, against the real Postgres and Redis
and the fake runtime. Protocol and route tests live here; what needs real processes (crashes,
restarts, the command line, deployment) stays in tests/e2e.

The in-process server gets a database of its own: it lives for the whole session, and its reaper
and worker would otherwise take up (and continue on its own queue) the responses that the
end-to-end tests' workers leave behind on purpose when they kill them."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.queue.arq_seam import QueueWorker
from app.settings import Settings
from tests.conftest import TEST_ENCRYPTION_KEY, Environment, key_of, new_environment
from tests.searxng_stand_in import SearxngStandIn
from workers.worker import build_worker


@dataclass(frozen=True)
class InProcess:
    """What tests of e2e shape need of a server: where it answers, and a client of it."""

    http: TestClient
    base_url: str = "http://testserver/v1"


@pytest.fixture(scope="session")
def environment(tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str) -> Iterator[Environment]:
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        yield environment


@pytest.fixture(scope="session")
def server(environment: Environment) -> Iterator[InProcess]:
    with serving_in_process(environment) as served:
        yield served


@contextmanager
def serving_in_process(environment: Environment, **settings_changed: Any) -> Iterator[InProcess]:
    """The application and a worker, in this process, on the environment's database (with these
    settings changed)."""
    settings = environment.settings().model_copy(
        update={
            "queue_name": f"responses:api:{secrets.token_hex(4)}",
            "follow_idle_seconds": 1.0,
            "encryption_keys": TEST_ENCRYPTION_KEY,
            **settings_changed,
        }
    )
    # What the test catalog's keyed model reads its server's key from (as Environment.env sets it).
    os.environ.setdefault("FAKE_UPSTREAM_KEY", "upstream-secret")
    with TestClient(create_app(settings), base_url="http://testserver") as http:
        worker = http.portal.call(_worker, settings)  # made on the application's loop, where it runs
        running = http.portal.start_task_soon(worker.main)
        try:
            yield InProcess(http)
        finally:
            running.cancel()
            try:
                running.result()
            except CancelledError:
                pass
            http.portal.call(worker.close)


async def _worker(settings: Settings) -> QueueWorker:
    return build_worker(settings, handle_signals=False)


@pytest.fixture
def client(server: InProcess, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=30, http_client=server.http)


@pytest.fixture
def other_client(server: InProcess, other_api_key: str) -> openai.OpenAI:
    """A client of another account."""
    return openai.OpenAI(
        base_url=server.base_url, api_key=other_api_key, max_retries=0, timeout=30, http_client=server.http
    )


@pytest.fixture(scope="session")
def web_server(environment: Environment, searxng: SearxngStandIn) -> Iterator[InProcess]:
    """The application and a worker searching the web through the SearXNG stand-in (a search
    taking over a second fails), opening its pages (of 100 kB at most)."""
    with serving_in_process(
        environment,
        web_search_url=searxng.url,
        web_search_timeout_seconds=1.0,
        web_fetch_allow="127.0.0.1/32",  # (the stand-in's pages)
        web_fetch_max_bytes=100_000,
    ) as served:
        yield served


@pytest.fixture
def web_client(web_server: InProcess, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=web_server.base_url, api_key=api_key, max_retries=0, timeout=30, http_client=web_server.http
    )


@pytest.fixture(scope="session")
def vector_server(vector_environment: Environment) -> Iterator[InProcess]:
    """The application and a worker on a database with pgvector: vector stores work there."""
    with serving_in_process(vector_environment) as served:
        yield served


@pytest.fixture
def vector_client(
    vector_server: InProcess, vector_environment: Environment, account_name: str, keys_made: dict[tuple[str, str], str]
) -> openai.OpenAI:
    key = key_of(keys_made, vector_environment, account_name)
    return openai.OpenAI(
        base_url=vector_server.base_url, api_key=key, max_retries=0, timeout=60, http_client=vector_server.http
    )


@pytest.fixture
def other_vector_client(
    vector_server: InProcess,
    vector_environment: Environment,
    other_account_name: str,
    keys_made: dict[tuple[str, str], str],
) -> openai.OpenAI:
    key = key_of(keys_made, vector_environment, other_account_name)
    return openai.OpenAI(
        base_url=vector_server.base_url, api_key=key, max_retries=0, timeout=60, http_client=vector_server.http
    )

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.conftest import Server
from tests.e2e.processes import PrivateRedis


@pytest.fixture
def client(server: Server, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def other_client(server: Server, other_api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=other_api_key, max_retries=0, timeout=30)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    server.close()

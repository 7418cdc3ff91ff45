"""bench/relay.py hands each side what the other sent, unchanged, so streaming through it measures
only what a server in between costs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import aiohttp
import pytest

from bench.relay import running_relay
from tests.conftest import streaming_chat_request


@pytest.fixture(scope="module")
def relay_url(fake_runtime_url: str) -> Iterator[str]:
    port = int(fake_runtime_url.rsplit(":", 1)[1])
    with running_relay(port) as (url, _):
        yield url


async def _answer(http: aiohttp.ClientSession, base_url: str, body: dict[str, object]) -> bytes:
    async with http.post(f"{base_url}/v1/chat/completions", json=body) as answer:
        assert answer.status == 200
        return await answer.read()


def _without_ids_and_times(stream: bytes) -> bytes:
    """(Each answer has an id and a creation time of its own.)"""
    return re.sub(rb'"(id|created)":\s*("[^"]*"|\d+)', b"", stream)


async def test_answers_through_it_are_the_runtimes_byte_for_byte(fake_runtime_url: str, relay_url: str) -> None:
    body = streaming_chat_request("tok tok tok tok tok")
    async with aiohttp.ClientSession() as http:
        direct = await _answer(http, fake_runtime_url, body)
        relayed = await _answer(http, relay_url, body)
    assert b"tok" in relayed
    assert _without_ids_and_times(relayed) == _without_ids_and_times(direct)


async def test_answers_one_after_another_and_one_closed_early_leave_it_serving(relay_url: str) -> None:
    long_answer = streaming_chat_request("x " * 100, delay=0.01)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        first = await _answer(http, relay_url, streaming_chat_request("a b c"))
        second = await _answer(http, relay_url, streaming_chat_request("d e"))
        async with http.post(f"{relay_url}/v1/chat/completions", json=long_answer) as cut:
            await cut.content.readline()
            cut.close()
        last = await _answer(http, relay_url, streaming_chat_request("still here"))
    for stream, text in ((first, "a b c"), (second, "d e"), (last, "still here")):
        deltas = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith(b"data: {")]
        assert "".join(d["choices"][0]["delta"].get("content", "") for d in deltas if d["choices"]) == text

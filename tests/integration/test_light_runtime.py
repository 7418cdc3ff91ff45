"""bench/light_runtime.py streams what the fake runtime streams for the benchmarks' answers, so a
benchmark run on it measures the same work."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.conftest import free_port, serving, streaming_chat_request


@pytest.fixture(scope="module")
def light_runtime_url() -> Iterator[str]:
    port = free_port()
    with serving("bench/light_runtime.py", str(port), port=port) as url:
        yield url


async def _answer(http: aiohttp.ClientSession, base_url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    async with http.post(f"{base_url}/v1/chat/completions", json=body) as answer:
        assert answer.status == 200
        async for line in answer.content:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                chunks.append(json.loads(line[len(b"data: ") :]))
    return chunks


def _summary(chunks: list[dict[str, Any]]) -> tuple[list[Any], list[Any], dict[str, Any]]:
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
    usage = chunks[-1]["usage"]
    return deltas, finishes, {key: usage[key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")}


@pytest.mark.parametrize("fields", [{}, {"max_tokens": 3}], ids=["whole", "cut by max_tokens"])
async def test_it_streams_the_chunks_the_fake_runtime_streams(
    fake_runtime_url: str, light_runtime_url: str, fields: dict[str, Any]
) -> None:
    body = streaming_chat_request("tok tok tok tok tok", **fields)
    async with aiohttp.ClientSession() as http:
        theirs = await _answer(http, fake_runtime_url, body)
        ours = await _answer(http, light_runtime_url, body)
    assert _summary(ours) == _summary(theirs)
    assert _summary(ours)[1][-1] == ("length" if fields else "stop")


async def test_chunks_come_at_their_pace_and_answers_share_a_kept_connection(light_runtime_url: str) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        started = time.perf_counter()
        first = await _answer(http, light_runtime_url, streaming_chat_request("a b c d e", delay=0.05))
        took = time.perf_counter() - started
        second = await _answer(http, light_runtime_url, streaming_chat_request("f g"))
    assert "".join(d.get("content", "") for d in _summary(first)[0]) == "a b c d e"
    assert "".join(d.get("content", "") for d in _summary(second)[0]) == "f g"
    assert took >= 4 * 0.05  # the fifth chunk is due four delays after the first


async def test_a_connection_closed_mid_answer_leaves_the_server_serving(light_runtime_url: str) -> None:
    long_answer = streaming_chat_request("x " * 100, delay=0.01)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{light_runtime_url}/v1/chat/completions", json=long_answer) as a:
            await a.content.readline()
            a.close()
        chunks = await _answer(http, light_runtime_url, streaming_chat_request("still here"))
    assert "".join(d.get("content", "") for d in _summary(chunks)[0]) == "still here"

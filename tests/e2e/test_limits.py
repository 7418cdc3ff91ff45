"""Admission limits: over its requests or tokens per minute an account's create is a 429 with
Retry-After and OpenAI's x-ratelimit-* headers, nothing stored, and it is let in again once the
window has passed; a model's full queue is a 429 too; tokens are settled with the real usage."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import cast

import httpx
import pytest
import redis

from tests.conftest import ROOT, Environment, FakeRuntime, Server, free_port, start_api, stop, wait_until

WINDOW = 2  # seconds: RESPONSES_LIMIT_WINDOW_SECONDS for these tests


def cli(environment: Environment, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=environment.env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def api(environment: Environment) -> Iterator[str]:
    port = free_port()
    process = start_api(environment, port, RESPONSES_LIMIT_WINDOW_SECONDS=str(WINDOW))
    yield f"http://127.0.0.1:{port}/v1"
    stop(process)


def limited_key(environment: Environment, **limits: int) -> tuple[str, str]:
    """A new account with these limits: its id and a key of it."""
    name = f"limited-{secrets.token_hex(3)}"
    account_id = cli(environment, "accounts", "create", name).strip().rsplit(" ", 1)[-1]
    key = cli(environment, "keys", "create", "--account", name).strip().splitlines()[-1]
    flags = [f"--{flag.replace('_', '-')}={value}" for flag, value in limits.items()]
    assert cli(environment, "limits", "set", name, *flags).startswith(name)
    return account_id, key


def start_of_a_window() -> None:
    """Waits for a window to begin, so that a test's requests fall in one."""
    time.sleep(WINDOW - time.time() % WINDOW + 0.05)


def create(api: str, key: str, **body: object) -> httpx.Response:
    payload = {"model": "fake", "input": "hello", **body}
    return httpx.post(f"{api}/responses", json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_requests_over_the_limit_are_refused_until_the_window_passes(
    environment: Environment, api: str, server: Server, fake: FakeRuntime
) -> None:
    _, key = limited_key(environment, requests_per_minute=2)
    start_of_a_window()
    first, second = create(api, key, input="first"), create(api, key, input="second")
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert (first.headers["x-ratelimit-remaining-requests"], second.headers["x-ratelimit-remaining-requests"]) == (
        "1",
        "0",
    )
    refused = create(api, key, input="third, refused")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests" and "requests" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert environment.query("SELECT 1 FROM items WHERE payload::text LIKE '%third, refused%'") == []
    time.sleep(int(refused.headers["retry-after"]) + 0.1)
    assert create(api, key, input="later").status_code == 200


def test_every_answer_to_a_counted_create_carries_its_rate_limits(
    environment: Environment, api: str, server: Server, fake: FakeRuntime
) -> None:
    """A stream, a background create and a create refused after it was counted (its previous
    response unknown) say what is left of the window, as a JSON answer does."""
    _, key = limited_key(environment, requests_per_minute=5)
    start_of_a_window()
    headers = {"Authorization": f"Bearer {key}"}
    payload = {"model": "fake", "input": "hello", "stream": True}
    with httpx.stream("POST", f"{api}/responses", json=payload, headers=headers, timeout=30) as streamed:
        assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
        assert streamed.headers["x-ratelimit-remaining-requests"] == "4"
        assert "response.completed" in streamed.read().decode()
    background = create(api, key, background=True)
    assert background.status_code == 200 and background.headers["x-ratelimit-remaining-requests"] == "3"
    unknown = create(api, key, previous_response_id="resp_unknown")
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "previous_response_id"
    assert unknown.headers["x-ratelimit-remaining-requests"] == "2"


def test_tokens_are_estimated_at_admission_and_settled_with_the_real_usage(
    environment: Environment, api: str, server: Server, fake: FakeRuntime
) -> None:
    account_id, key = limited_key(environment, tokens_per_minute=60)
    start_of_a_window()
    window = int(time.time()) // WINDOW
    refused = create(api, key, max_output_tokens=64)  # may generate more than the minute allows
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    admitted = create(api, key, max_output_tokens=16)
    assert admitted.status_code == 200
    estimate = 60 - int(admitted.headers["x-ratelimit-remaining-tokens"])
    assert estimate > 16  # its input, and the 16 it may generate
    real = admitted.json()["usage"]["total_tokens"]
    assert real < estimate
    counters = redis.Redis.from_url(environment.redis_url)
    try:
        counter = f"responses:limits:tokens:{account_id}:{window}"
        wait_until(lambda: int(cast(bytes | None, counters.get(counter)) or 0) == real, timeout=5)  # settled
    finally:
        counters.close()


def test_a_models_full_queue_refuses_new_responses(
    environment: Environment, api: str, server: Server, fake: FakeRuntime, api_key: str
) -> None:
    waiting = create(api, api_key, model="capped", background=True)  # nobody hosts it: it waits
    assert waiting.status_code == 200
    try:
        full = create(api, api_key, model="capped", background=True)
        assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
        assert full.headers["retry-after"] == "1"
    finally:
        httpx.post(f"{api}/responses/{waiting.json()['id']}/cancel", headers={"Authorization": f"Bearer {api_key}"})


def test_an_account_at_its_concurrency_limit_is_refused_until_one_ends(
    environment: Environment, api: str, server: Server, fake: FakeRuntime
) -> None:
    _, key = limited_key(environment, concurrent=1)
    slow = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(20)), "delay": 0.05})
    running = create(api, key, input=slow, background=True)
    assert running.status_code == 200
    refused = create(api, key, input="a second one at once")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "Concurrency limit reached" in refused.json()["error"]["message"]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    headers = {"Authorization": f"Bearer {key}"}
    wait_until(
        lambda: httpx.get(f"{api}/responses/{running.json()['id']}", headers=headers).json()["status"] == "completed"
    )
    assert create(api, key, input="now there is room").status_code == 200
    shown = cli(environment, "limits", "show")
    assert "concurrent=1" in shown

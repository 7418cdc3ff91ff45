"""A foreground client that leaves stops its generation: the runtime stream is closed (the GPU
is freed) and the stored response ends `cancelled` with what was generated so far."""

from __future__ import annotations

import json
import threading

import httpx
import openai

from tests.conftest import Environment, FakeRuntime, Server, wait_until

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(60)), "delay": 0.1})


def leave_after_first_delta(server: Server, api_key: str, **body: object) -> str:
    """Streams SLOW and hangs up at its first text delta; returns the response's id."""
    response_id: str | None = None
    with httpx.stream(
        "POST",
        f"{server.base_url}/responses",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": "fake", "input": SLOW, "stream": True, **body},
        timeout=30,
    ) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                response_id = event.get("response", {}).get("id", response_id)
                if event["type"] == "response.output_text.delta":
                    break  # and the connection closes here
    assert response_id is not None
    return response_id


def test_leaving_a_stream_stops_the_generation(
    server: Server, api_key: str, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response_id = leave_after_first_delta(server, api_key)
    wait_until(lambda: client.responses.retrieve(response_id).status == "cancelled")
    wait_until(lambda: fake.stats()["streams_aborted"] == 1)
    cancelled = client.responses.retrieve(response_id)
    assert cancelled.output_text.startswith("w0")
    assert len(cancelled.output_text.split()) < 60
    assert fake.stats()["streams_finished"] == 0


def test_leaving_a_json_request_stops_the_generation(
    server: Server, api_key: str, fake: FakeRuntime, environment: Environment
) -> None:
    def post() -> None:
        try:
            httpx.post(
                f"{server.base_url}/responses",
                headers={"Authorization": f"Bearer {api_key}"},
                json={"model": "fake", "input": SLOW},
                timeout=0.8,
            )
        except httpx.ReadTimeout:
            pass  # the client gives up and closes its connection

    thread = threading.Thread(target=post)
    thread.start()
    thread.join()
    wait_until(lambda: fake.stats()["streams_aborted"] == 1)
    assert fake.stats()["streams_finished"] == 0
    [latest] = environment.query("SELECT status FROM responses ORDER BY created_at DESC LIMIT 1")
    assert latest["status"] == "cancelled"


def test_leaving_a_store_false_stream_stops_the_generation(
    server: Server, api_key: str, fake: FakeRuntime, environment: Environment
) -> None:
    response_id = leave_after_first_delta(server, api_key, store=False)
    wait_until(lambda: fake.stats()["streams_aborted"] == 1)  # its worker was told, with no row to flag
    assert fake.stats()["streams_finished"] == 0
    assert environment.query("SELECT 1 FROM responses WHERE id = $1", response_id) == []

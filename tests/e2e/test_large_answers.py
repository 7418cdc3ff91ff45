"""A very large answer (10 MB) completes in every mode, and no Redis message carries it: the events
channel only says that events were committed, and followers read big ones from where they lie."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest
import redis

from app.queue.redis_keys import events_channel
from tests.conftest import Environment, FakeRuntime

ANSWER_BYTES = 10 * 1024 * 1024
LARGEST_MESSAGE_ALLOWED = 1024 * 1024
BIG = "#fake " + json.dumps({"filler": {"bytes": ANSWER_BYTES, "chunk_bytes": 256 * 1024}})


def expected_text() -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return (letters * (ANSWER_BYTES // len(letters) + 1))[:ANSWER_BYTES]


@contextmanager
def largest_event_message(environment: Environment) -> Iterator[list[int]]:
    """The size of the largest message on the events channel while the block runs."""
    largest = [0]
    connection = redis.Redis.from_url(environment.redis_url)
    pubsub = connection.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(events_channel(environment.queue_name))
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            message = pubsub.get_message(timeout=0.1)
            if message and message["type"] == "message":
                largest[0] = max(largest[0], len(message["data"]))

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        yield largest
    finally:
        done.set()
        listener.join()
        pubsub.close()
        connection.close()


@pytest.fixture
def big_client(client: openai.OpenAI) -> openai.OpenAI:
    return client.with_options(timeout=120)


@pytest.mark.parametrize("store", [True, False])
def test_a_10_mb_answer_as_json(
    big_client: openai.OpenAI, fake: FakeRuntime, environment: Environment, store: bool
) -> None:
    with largest_event_message(environment) as largest:
        response = big_client.responses.create(model="fake", input=BIG, store=store)
    assert response.status == "completed"
    assert response.output_text == expected_text()
    assert largest[0] < LARGEST_MESSAGE_ALLOWED
    # The event bus is still there for the next one.
    assert big_client.responses.create(model="fake", input="still here?").output_text == "Echo: still here?"


@pytest.mark.parametrize("store", [True, False])
def test_a_10_mb_answer_streamed(
    big_client: openai.OpenAI, fake: FakeRuntime, environment: Environment, store: bool
) -> None:
    with largest_event_message(environment) as largest:
        events = list(big_client.responses.create(model="fake", input=BIG, store=store, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == expected_text()
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text
    assert largest[0] < LARGEST_MESSAGE_ALLOWED


def test_a_10_mb_answer_in_the_background_polled_and_replayed(
    big_client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    with largest_event_message(environment) as largest:
        stream = big_client.responses.create(model="fake", input=BIG, background=True, stream=True)
        live = list(stream)
    assert live[-1].type == "response.completed"
    response_id = live[-1].response.id
    assert big_client.responses.retrieve(response_id).output_text == expected_text()
    replay = list(big_client.responses.retrieve(response_id, stream=True, starting_after=2))
    assert [e.sequence_number for e in replay] == [e.sequence_number for e in live[3:]]
    assert replay[-1].response.output_text == expected_text()
    assert largest[0] < LARGEST_MESSAGE_ALLOWED


def sse_data(answer: httpx.Response) -> list[str]:
    return [line for line in answer.text.split("\n") if line.startswith("data: ")]


def test_a_large_answer_is_stored_once_beside_its_deltas_and_replays_as_it_streamed(
    big_client: openai.OpenAI, fake: FakeRuntime, environment: Environment, api_key: str
) -> None:
    body = {
        "model": "fake",
        "input": BIG,
        "background": True,
        "stream": True,
        "stream_options": {"include_obfuscation": False},
    }
    url = f"{big_client.base_url}responses"
    headers = {"Authorization": f"Bearer {api_key}"}
    live = httpx.post(url, json=body, headers=headers, timeout=120)
    response_id = json.loads(sse_data(live)[0].removeprefix("data: "))["response"]["id"]
    replay = httpx.get(
        f"{url}/{response_id}", params={"stream": "true", "include_obfuscation": "false"}, headers=headers, timeout=120
    )
    assert sse_data(replay) == sse_data(live)  # byte for byte, the referring events put back whole
    [stored] = environment.query(
        "SELECT sum(octet_length(e.payload)) AS bytes, count(e.output_at) FILTER (WHERE e.output_path <> '{response}') "
        "AS referring, count(*) FILTER (WHERE e.output_path = '{response}') AS opening_again "
        "FROM event_log e JOIN responses r ON r.log_key = e.log_key WHERE r.id = $1",
        response_id,
    )
    # The deltas hold the text once; the done events and the terminal one refer to the items, and
    # `queued` to the response object `created` holds.
    assert stored["referring"] == 4 and stored["bytes"] < 1.1 * ANSWER_BYTES
    assert stored["opening_again"] == 1
    assert big_client.responses.retrieve(response_id).output_text == expected_text()

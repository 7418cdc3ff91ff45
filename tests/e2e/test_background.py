"""Background responses on the same spine: queued at once, followed or replayed from the event log,
cancelled through the API."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.conftest import Environment, FakeRuntime, Server, wait_until

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(30)), "delay": 0.05})


def wait_for_status(client: openai.OpenAI, response_id: str, statuses: set[str]) -> str:
    wait_until(lambda: client.responses.retrieve(response_id).status in statuses)
    return client.responses.retrieve(response_id).status or ""


def test_background_create_answers_queued_at_once(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True)
    assert response.status == "queued" and response.background is True
    assert response.output == [] and response.usage is None
    assert wait_for_status(client, response.id, {"completed"}) == "completed"
    assert client.responses.retrieve(response.id).output_text.split()[-1] == "w29"


def test_background_stream_can_be_dropped_and_resumed(client: openai.OpenAI, fake: FakeRuntime) -> None:
    stream = client.responses.create(model="fake", input=SLOW, background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if event.sequence_number == 6:
            break
    stream.close()
    assert [e.type for e in seen[:2]] == ["response.created", "response.queued"]
    response_id = seen[0].response.id
    resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=6))
    assert [e.sequence_number for e in resumed] == list(range(7, 7 + len(resumed)))
    assert resumed[-1].type == "response.completed"
    text = "".join(e.delta for e in seen + resumed if e.type == "response.output_text.delta")
    assert text == resumed[-1].response.output_text
    replay = list(client.responses.retrieve(response_id, stream=True))  # after the end: the whole log again
    assert [e.model_dump(exclude={"obfuscation"}) for e in replay[7:]] == [
        e.model_dump(exclude={"obfuscation"}) for e in resumed
    ]


def test_sdk_stream_helper_resumes_by_response_id(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True, stream=True)
    first = next(iter(response))
    response.close()
    with client.responses.stream(response_id=first.response.id, starting_after=3) as stream:
        numbers = [event.sequence_number for event in stream]
        final = stream.get_final_response()
    assert numbers[0] == 4
    assert final.output_text.split()[-1] == "w29"


@pytest.mark.parametrize(
    ("background", "message"),
    [
        (False, "not created with background=true"),
        (True, "not created with stream=true"),
    ],
)
def test_streaming_back_a_response_that_was_not_streamed_is_400(
    background: bool, message: str, server: Server, api_key: str, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response = client.responses.create(model="fake", input="x", background=background)
    answer = httpx.get(
        f"{server.base_url}/responses/{response.id}",
        params={"stream": "true"},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "stream" and message in answer.json()["error"]["message"]


def test_cancel_a_running_background_response(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True)
    wait_until(lambda: client.responses.retrieve(response.id).output_text)
    cancelled = client.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
    assert 0 < len(cancelled.output_text.split()) < 30
    assert client.responses.cancel(response.id).model_dump() == cancelled.model_dump()  # idempotent
    wait_until(lambda: fake.stats()["streams_aborted"] >= 1)  # the worker has stopped it
    assert client.responses.retrieve(response.id).model_dump() == cancelled.model_dump()  # final


def test_cancel_a_finished_background_response_returns_it_unchanged(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="quick", background=True)
    wait_for_status(client, response.id, {"completed"})
    assert client.responses.cancel(response.id).status == "completed"


def test_cancel_of_a_foreground_response_is_400(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(response.id)


def test_previous_response_that_is_still_running_is_400(client: openai.OpenAI, fake: FakeRuntime) -> None:
    running = client.responses.create(model="fake", input=SLOW, background=True)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="next", previous_response_id=running.id)
    assert caught.value.param == "previous_response_id"
    wait_for_status(client, running.id, {"completed"})


def test_polling_a_running_response_shows_its_output_so_far(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True)
    wait_until(lambda: client.responses.retrieve(response.id).output_text)
    polled = client.responses.retrieve(response.id)
    assert polled.status == "in_progress"
    assert polled.output[0].status == "in_progress"
    assert polled.output_text.startswith("w0")
    assert wait_for_status(client, response.id, {"completed"}) == "completed"


def test_a_follower_sees_the_cancellation(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True, stream=True)
    first = next(iter(response))
    response.close()
    wait_for_status(client, first.response.id, {"in_progress"})
    follower = client.responses.retrieve(first.response.id, stream=True, starting_after=0)
    client.responses.cancel(first.response.id)
    events = list(follower)
    # Not an SDK event type (OpenAI documents none for this), so the SDK keeps it as plain data.
    last = events[-1].model_dump()
    assert last["type"] == "response.cancelled" and last["response"]["status"] == "cancelled"
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


def test_deleting_a_running_background_response_stops_it_first(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=SLOW, background=True)
    wait_for_status(client, response.id, {"in_progress"})
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    wait_until(lambda: fake.stats()["streams_aborted"] >= 1)  # the generation was stopped, not left running
    assert fake.stats()["streams_finished"] == 0


def test_background_with_store_false_can_be_polled_but_not_continued(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="transient job", background=True, store=False)
    assert response.model_dump()["store"] is False
    assert wait_for_status(client, response.id, {"completed"}) == "completed"
    assert client.responses.retrieve(response.id).output_text == "Echo: transient job"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="next", previous_response_id=response.id)
    assert caught.value.code == "previous_response_not_found"


def test_a_stream_older_than_its_log_window_cannot_be_streamed_back(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment, server: Server, api_key: str
) -> None:
    response = client.responses.create(model="fake", input="old", background=True, stream=True)
    response_id = next(iter(response)).response.id
    response.close()
    wait_for_status(client, response_id, {"completed"})
    environment.query("UPDATE responses SET completed_at = now() - interval '25 hours' WHERE id = $1", response_id)
    answer = httpx.get(
        f"{server.base_url}/responses/{response_id}",
        params={"stream": "true"},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "stream"
    assert "no longer be streamed" in answer.json()["error"]["message"]
    assert client.responses.retrieve(response_id).status == "completed"  # retrievable all the same


def test_resuming_after_the_last_event_of_a_finished_stream_ends_at_once(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    created = list(client.responses.create(model="fake", input="short", background=True, stream=True))
    last = created[-1].sequence_number
    started = time.monotonic()
    assert list(client.responses.retrieve(created[0].response.id, stream=True, starting_after=last)) == []
    assert list(client.responses.retrieve(created[0].response.id, stream=True, starting_after=last + 50)) == []
    assert time.monotonic() - started < 2  # not after an idle wait


def test_a_replay_pads_deltas_unless_asked_not_to(
    server: Server, api_key: str, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    created = list(client.responses.create(model="fake", input="pad me", background=True, stream=True))
    url = f"{server.base_url}/responses/{created[0].response.id}"
    for params, padded in (({"stream": "true"}, True), ({"stream": "true", "include_obfuscation": "false"}, False)):
        body = httpx.get(url, params=params, headers={"Authorization": f"Bearer {api_key}"}).text
        deltas = [json.loads(line[6:]) for line in body.splitlines() if '"response.output_text.delta"' in line]
        assert deltas and all(("obfuscation" in d) == padded for d in deltas)

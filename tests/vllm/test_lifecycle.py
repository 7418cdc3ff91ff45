"""The stored lifecycle over real vLLM: answers and streams, storage, chains and conversations,
background responses resumed mid-stream, cancel and disconnect aborting the engine's request."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import read_socket, wait_until
from tests.vllm.conftest import HOSTED, VllmStack

# Greedy (temperature 0), its answer runs past 256 tokens: sampled at the model's default of 1, it
# may end after a few.
LONG = "Write a long story about a lighthouse keeper and the sea."


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_an_answer_carries_the_engines_counts(vllm: VllmStack) -> None:
    requests_before = vllm.engine_metric("vllm:request_success_total")
    generated_before = vllm.engine_metric("vllm:generation_tokens_total")
    response = vllm.client.responses.create(model=HOSTED, input="Name a colour.", max_output_tokens=16)
    assert response.status in ("completed", "incomplete") and response.output_text
    usage = response.usage
    assert usage is not None
    assert usage.input_tokens == vllm.engine_count([user("Name a colour.")])
    assert usage.output_tokens == vllm.engine_metric("vllm:generation_tokens_total") - generated_before
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert vllm.engine_metric("vllm:request_success_total") == requests_before + 1  # one generation, no retry


def test_a_stream_adds_up_to_the_stored_answer(vllm: VllmStack) -> None:
    events = list(vllm.client.responses.create(model=HOSTED, input="Count to ten.", max_output_tokens=24, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == final.output_text == vllm.client.responses.retrieve(final.id).output_text
    assert final.usage is not None and final.usage.output_tokens > 0


def test_a_stored_answer_is_retrieved_listed_and_deleted(vllm: VllmStack) -> None:
    client = vllm.client
    response = client.responses.create(model=HOSTED, instructions="Be brief.", input="Say hi.", max_output_tokens=16)
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.status == response.status
    [item] = client.responses.input_items.list(response.id).data
    assert item.type == "message" and item.content[0].text == "Say hi."
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_a_chain_and_a_conversation_send_the_engine_every_earlier_turn(vllm: VllmStack) -> None:
    client = vllm.client
    first = client.responses.create(model=HOSTED, input="My name is Ada.", max_output_tokens=16)
    second = client.responses.create(
        model=HOSTED, input="What is my name?", previous_response_id=first.id, max_output_tokens=16
    )
    turns = [user("My name is Ada."), {"role": "assistant", "content": first.output_text}, user("What is my name?")]
    assert second.usage is not None and second.usage.input_tokens == vllm.engine_count(turns)

    conversation = client.conversations.create()
    one = client.responses.create(
        model=HOSTED, input="My name is Ada.", conversation=conversation.id, max_output_tokens=16
    )
    two = client.responses.create(
        model=HOSTED, input="What is my name?", conversation=conversation.id, max_output_tokens=16
    )
    turns[1] = {"role": "assistant", "content": one.output_text}
    assert two.usage is not None and two.usage.input_tokens == vllm.engine_count(turns)
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message"] * 4


def test_a_background_stream_resumes_after_any_event(vllm: VllmStack) -> None:
    client = vllm.client
    head = []
    with client.responses.create(
        model=HOSTED, input=LONG, background=True, stream=True, temperature=0, max_output_tokens=48
    ) as live:
        for event in live:
            head.append(event)
            if sum(e.type == "response.output_text.delta" for e in head) == 5:
                break  # the connection drops here
    queued = head[0].response
    resumed = list(client.responses.retrieve(queued.id, stream=True, starting_after=head[-1].sequence_number))
    events = head + resumed
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == client.responses.retrieve(queued.id).output_text and text


def test_a_cancel_aborts_the_request_inside_vllm(vllm: VllmStack) -> None:
    client = vllm.client
    aborted = vllm.aborted_requests()
    generated = vllm.engine_metric("vllm:generation_tokens_total")
    response = client.responses.create(model=HOSTED, input=LONG, background=True, temperature=0, max_output_tokens=256)
    wait_until(lambda: client.responses.retrieve(response.id).output_text, timeout=60)
    assert client.responses.cancel(response.id).status == "cancelled"
    wait_until(lambda: vllm.aborted_requests() == aborted + 1, timeout=10)
    # (vLLM's front end logs the abort before its engine's next step says what runs)
    wait_until(lambda: vllm.engine_metric("vllm:num_requests_running") == 0, timeout=5)
    assert vllm.engine_metric("vllm:generation_tokens_total") - generated < 128  # far from its 256
    assert client.responses.retrieve(response.id).status == "cancelled"


def test_a_foreground_client_that_leaves_aborts_its_generation(vllm: VllmStack) -> None:
    aborted = vllm.aborted_requests()
    stream = vllm.client.responses.create(model=HOSTED, input=LONG, stream=True, temperature=0, max_output_tokens=256)
    deltas = 0
    for event in stream:
        deltas += event.type == "response.output_text.delta"
        if deltas == 3:
            break
    stream.close()
    wait_until(lambda: vllm.aborted_requests() == aborted + 1, timeout=10)
    wait_until(lambda: vllm.engine_metric("vllm:num_requests_running") == 0, timeout=5)


def test_a_steered_answer_is_followed_by_its_successor_on_the_socket(vllm: VllmStack) -> None:
    """WebSocket steering over the real engine: a steer sent while the story is being written
    waits for the story's end (its one item: no boundary comes first), then the successor the
    socket creates answers the steer, continuing the story's chain."""
    with vllm.client.responses.connect() as connection:
        connection.response.create(model=HOSTED, input=LONG, max_output_tokens=48, temperature=0)
        events: list[Any] = []
        read_socket(connection, events, until=lambda event: event.type == "response.output_text.delta")
        steered_id = events[0].response.id
        connection.response.steer(input="Now name the keeper in one word.", previous_response_id=steered_id)
        ends = read_socket(connection, events, ends=2)
    assert "response.steer.accepted" in [e.type for e in events]
    story, successor = ends
    assert story.id == steered_id and story.status in ("completed", "incomplete")
    assert story.incomplete_details is None or story.incomplete_details.reason == "max_output_tokens"
    assert successor.previous_response_id == steered_id and successor.status in ("completed", "incomplete")
    assert successor.output_text
    context = vllm.client.responses.input_items.list(successor.id, order="asc").data
    assert [getattr(item, "role", None) for item in context] == ["user", "assistant", "user"]

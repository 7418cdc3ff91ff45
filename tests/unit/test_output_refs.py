"""Closing events of a large answer stored by reference to the output items: put back, each is
the very text that was sent live."""

from __future__ import annotations

from typing import Any

from app.protocol import encoding
from app.storage import output_refs
from workers.translation.translate import StreamTranslator


def answered(text: str, reasoning: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The events of an answer as a generation makes them, ending with a terminal event; its output."""
    translator = StreamTranslator()
    events = []
    if reasoning:
        events += translator.on_chunk({"choices": [{"delta": {"reasoning_content": reasoning}, "finish_reason": None}]})
    events += translator.on_chunk({"choices": [{"delta": {"content": text}, "finish_reason": None}]})
    closing, output = translator.close()
    terminal = {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": output}}
    return [*events, *closing, terminal], output


def put_back(stored: output_refs.Stored, output: list[dict[str, Any]]) -> str:
    """What the read in app/storage/events.py does, in Python."""
    if stored.output_at is None:
        return stored.payload
    value: Any = output
    for step in (stored.output_path or "").split(","):
        if step:
            value = value[int(step)] if isinstance(value, list) else value[step]
    return stored.payload[: stored.output_at] + encoding.encode(value) + stored.payload[stored.output_at :]


def test_a_large_answers_closing_events_leave_their_output_out_and_read_back_whole() -> None:
    events, output = answered("x" * output_refs.REFERENCE_FROM_BYTES, reasoning="thinking " * 100)
    encoded = [encoding.encode(e) for e in events]
    stored = output_refs.as_stored(events, encoded, output)
    referring = [(e["type"], s.output_path) for e, s in zip(events, stored, strict=True) if s.output_at is not None]
    assert referring == [
        ("response.reasoning_text.done", "0,content,0,text"),
        ("response.content_part.done", "0,content,0"),
        ("response.output_item.done", "0"),
        ("response.output_text.done", "1,content,0,text"),
        ("response.content_part.done", "1,content,0"),
        ("response.output_item.done", "1"),
        ("response.completed", ""),
    ]
    assert [put_back(s, output) for s in stored] == encoded
    assert sum(len(s.payload) for s in stored) < 1.1 * output_refs.REFERENCE_FROM_BYTES + 3000


def test_a_small_answer_and_a_response_still_running_are_stored_whole() -> None:
    events, output = answered("a short answer")
    encoded = [encoding.encode(e) for e in events]
    assert [s.payload for s in output_refs.as_stored(events, encoded, output)] == encoded
    assert all(s.output_at is None for s in output_refs.as_stored(events, encoded, output))
    big, _ = answered("x" * output_refs.REFERENCE_FROM_BYTES)
    big_encoded = [encoding.encode(e) for e in big]
    assert all(s.output_at is None for s in output_refs.as_stored(big, big_encoded, None))  # not ending


def test_an_event_that_differs_from_the_output_is_stored_whole() -> None:
    events, output = answered("x" * output_refs.REFERENCE_FROM_BYTES)
    altered = [{**output[0], "status": "incomplete"}]  # what the items say is not what the events said
    encoded = [encoding.encode(e) for e in events]
    stored = output_refs.as_stored(events, encoded, altered)
    kinds = [e["type"] for e, s in zip(events, stored, strict=True) if s.output_at is not None]
    assert "response.output_item.done" not in kinds and "response.completed" not in kinds
    assert [put_back(s, altered) for s in stored] == encoded


def put_back_opening(stored: list[output_refs.Stored], number: int, numbered: bool = False) -> str:
    """What the read does for an opening event stored by reference, in Python: the response
    object of the event before it, from its prefix to its sequence number (or closing brace)."""
    one, before = stored[number], stored[number - 1].payload
    kind = before[9 : before.index('"', 9)]
    end = f',"sequence_number":{number - 1}}}' if numbered else "}"
    assert one.output_at is not None and one.output_path == "response"
    piece = before[len(f'{{"type":"{kind}","response":') : len(before) - len(end)]
    return one.payload[: one.output_at] + piece + one.payload[one.output_at :]


def test_an_opening_event_repeating_the_response_object_before_it_leaves_it_out() -> None:
    response = {"id": "resp_1", "status": "queued", "metadata": {"k": 'a,"sequence_number":1}'}}
    events = [{"type": t, "response": response} for t in ("response.created", "response.queued")]
    events.append({"type": "response.in_progress", "response": {**response, "status": "in_progress"}})
    encoded = [encoding.encode(e) for e in events]
    stored = output_refs.as_stored(events, encoded, None)
    assert [s.output_path for s in stored] == [None, "response", None]  # in_progress differs: whole
    assert stored[1].payload == '{"type":"response.queued","response":}'
    assert put_back_opening(stored, 1) == encoded[1]

    numbered = encoding.numbered(events, encoded, 0)  # as a create stores them
    stored = output_refs.numbered_as_stored(numbered)
    assert [s.output_path for s in stored] == [None, "response", None]
    assert put_back_opening(stored, 1, numbered=True) == numbered[1].json
    assert stored[0].payload == numbered[0].json and stored[2].payload == numbered[2].json


def test_an_opening_event_without_the_same_object_just_before_it_is_stored_whole() -> None:
    response = {"id": "resp_1", "status": "in_progress"}
    delta = {"type": "response.output_text.delta", "delta": "hi"}
    alone: list[dict[str, Any]] = [{"type": "response.in_progress", "response": response}]
    after_a_delta: list[dict[str, Any]] = [delta, {"type": "response.in_progress", "response": response}]
    for events in (alone, after_a_delta):
        stored = output_refs.as_stored(events, [encoding.encode(e) for e in events], None)
        assert all(s.output_at is None for s in stored)

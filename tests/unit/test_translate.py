"""Chat chunks → Responses events: the structure the SDK's stream helper asserts."""

from __future__ import annotations

from typing import Any

from workers.translate import StreamTranslator


def chunk(
    content: str | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choices = [] if usage else [{"delta": {"content": content} if content is not None else {}, "finish_reason": finish}]
    return {"choices": choices, **({"usage": usage} if usage else {})}


def run(*chunks: dict[str, Any]) -> tuple[StreamTranslator, list[dict[str, Any]]]:
    translator = StreamTranslator()
    events = [e for c in chunks for e in translator.on_chunk(c)]
    return translator, events


def test_text_opens_the_message_once_then_deltas() -> None:
    translator, events = run(chunk(""), chunk("Hel"), chunk("lo"), chunk(finish="stop"))
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert events[0]["item"]["content"] == [] and events[0]["item"]["status"] == "in_progress"
    item_id = events[0]["item"]["id"]
    assert all(e.get("item_id", item_id) == item_id for e in events)
    closing, output = translator.close()
    assert [e["type"] for e in closing] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert closing[0]["text"] == "Hello"
    assert output == [closing[-1]["item"]]
    assert output[0]["status"] == "completed" and output[0]["id"] == item_id


def test_length_finish_is_incomplete() -> None:
    translator, _ = run(chunk("a"), chunk(finish="length"))
    assert translator.incomplete_reason == "max_output_tokens"
    _, output = translator.close()
    assert output[0]["status"] == "incomplete"


def test_usage_keeps_totals_consistent_and_maps_details() -> None:
    translator, _ = run(
        chunk("a"),
        chunk(
            usage={
                "prompt_tokens": 10,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 3},
            }
        ),
    )
    assert translator.usage_object() == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 17,
    }


def test_partial_output_of_a_stopped_generation() -> None:
    translator, _ = run(chunk("par"), chunk("tial"))
    [item] = translator.partial_output()
    assert item["status"] == "incomplete" and item["content"][0]["text"] == "partial"
    assert StreamTranslator().partial_output() == []

"""Coalescing of text deltas that wait for the same commit."""

from __future__ import annotations

from typing import Any

from workers.event_log import _coalesce


def delta(text: str, item: str = "msg_1", content_index: int = 0) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item,
        "output_index": 0,
        "content_index": content_index,
        "delta": text,
        "logprobs": [],
    }


def test_consecutive_deltas_of_one_part_merge() -> None:
    pending = [delta("Hel")]
    assert _coalesce(pending, delta("lo"))
    assert pending == [delta("Hello")]


def test_other_events_and_other_parts_do_not_merge() -> None:
    pending = [delta("a")]
    assert not _coalesce(pending, delta("b", item="msg_2"))
    assert not _coalesce(pending, delta("b", content_index=1))
    assert not _coalesce(pending, {"type": "response.output_text.done", "text": "a"})
    assert not _coalesce([], delta("a"))
    assert not _coalesce([{"type": "response.content_part.added"}], delta("a"))
    assert pending == [delta("a")]

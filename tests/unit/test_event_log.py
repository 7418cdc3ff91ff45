"""Coalescing of deltas that wait for the same commit."""

from __future__ import annotations

from app.events.writer import _coalesce
from tests.deltas import text_delta


def test_consecutive_deltas_of_one_part_merge() -> None:
    pending = [text_delta("Hel")]
    assert _coalesce(pending, text_delta("lo"))
    assert pending == [text_delta("Hello")]


def test_other_events_and_other_parts_do_not_merge() -> None:
    pending = [text_delta("a")]
    assert not _coalesce(pending, text_delta("b", item_id="msg_2"))
    assert not _coalesce(pending, text_delta("b", content_index=1))
    assert not _coalesce(pending, {"type": "response.output_text.done", "text": "a"})
    assert not _coalesce([], text_delta("a"))
    assert not _coalesce([{"type": "response.content_part.added"}], text_delta("a"))
    assert pending == [text_delta("a")]


def test_reasoning_and_function_argument_deltas_merge_too_but_not_with_each_other() -> None:
    reasoning = {"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 0, "content_index": 0}
    arguments = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1}
    pending = [{**reasoning, "delta": "thin"}]
    assert _coalesce(pending, {**reasoning, "delta": "king"})
    assert not _coalesce(pending, {**arguments, "delta": '{"a"'})
    pending.append({**arguments, "delta": '{"a"'})
    assert _coalesce(pending, {**arguments, "delta": ": 1}"})
    assert [e["delta"] for e in pending] == ["thinking", '{"a": 1}']


def test_merged_text_deltas_keep_every_tokens_logprobs() -> None:
    first, second = {"token": "Hel", "logprob": -0.1}, {"token": "lo", "logprob": -0.2}
    pending = [{**text_delta("Hel"), "logprobs": [first]}]
    assert _coalesce(pending, {**text_delta("lo"), "logprobs": [second]})
    assert pending == [{**text_delta("Hello"), "logprobs": [first, second]}]


def test_summary_deltas_merge_within_one_summary_part() -> None:
    summary = {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0}
    pending = [{**summary, "summary_index": 0, "delta": "a"}]
    assert not _coalesce(pending, {**summary, "summary_index": 1, "delta": "b"})
    assert _coalesce(pending, {**summary, "summary_index": 0, "delta": "c"})
    assert pending == [{**summary, "summary_index": 0, "delta": "ac"}]

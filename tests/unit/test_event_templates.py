"""How an event is split into a template and its delta's text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.protocol import encoding
from app.storage.event_templates import split
from tests.deltas import text_delta


@pytest.mark.parametrize(
    "text",
    ["Hello", "", ' "quoted" ,"delta":"x"', "\\", "\u00e9\u4e2d\U0001f600", "line\nbreak\ttab", ',"delta":'],
)
def test_a_delta_is_its_template_and_its_text_and_nothing_is_lost(text: str) -> None:
    event = text_delta(text)
    encoded = encoding.encode(event)
    parts = split(event, encoded)
    assert parts.template is not None
    assert parts.head + parts.body + parts.tail == encoded[:-1]
    assert orjson.loads(parts.body) == text
    assert split(text_delta("other"), encoding.encode(text_delta("other"))).head == parts.head  # one template per part


def test_the_parts_of_a_response_have_templates_of_their_own() -> None:
    def template(**fields: Any) -> int | None:
        event = {k: v for k, v in text_delta("a", **fields).items() if v is not None}  # None: a field it has not
        return split(event, encoding.encode(event)).template

    kinds = [
        template(),
        template(content_index=1),
        template(output_index=1),
        template(type="response.reasoning_text.delta"),
        template(type="response.function_call_arguments.delta", content_index=None),
        template(type="response.custom_tool_call_input.delta", content_index=None),
    ]
    assert len(set(kinds)) == len(kinds)
    summary = {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0}
    summaries = [{**summary, "summary_index": n, "delta": "a"} for n in (0, 1)]
    assert len({split(e, encoding.encode(e)).template for e in summaries}) == 2


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.created", "response": {"id": "resp_1"}},
        text_delta("a", logprobs=[{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}]),
        text_delta("a", output_index=10**9),
        text_delta("a", content_index=-1),
        text_delta("a", content_index=True),
        text_delta(None),
    ],
)
def test_anything_else_is_stored_whole(event: dict[str, Any]) -> None:
    encoded = encoding.encode(event)
    parts = split(event, encoded)
    assert parts.template is None and parts.head == encoded[:-1] and parts.body == parts.tail == ""

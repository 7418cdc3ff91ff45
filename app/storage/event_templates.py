"""Deltas stored as their text alone.

The deltas of one part of a response differ only in their text: `{"type":…,"item_id":…,
"output_index":…,"content_index":…,"delta":"…","logprobs":[]}`. A delta is stored as the JSON
of its text and the number of a template (`event_templates`), which holds the rest once per part:
the JSON before the delta's value (`prefix`) and after it without the closing brace (`suffix`).
A read puts the event back as `prefix + delta + suffix + ',"sequence_number":N}'`, the text the
followers got live (app/protocol/encoding.py `numbered`).

A template's number comes from what identifies a part within a response (the delta type, the
output index and the content or summary index), not from its text; the statement that stores a
delta stores it compact only when the stored template is exactly its own, else whole. So a
template never puts back another event's text, whatever a generation sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.protocol.vocabulary import DELTA_TARGETS

_TYPE_CODES = {kind: code for code, kind in enumerate(DELTA_TARGETS)}
_SUB_INDEX_LIMIT = 1024
_OUTPUT_INDEX_LIMIT = 2**31 // (8 * _SUB_INDEX_LIMIT)
_DELTA_KEY = ',"delta":'


@dataclass(frozen=True, slots=True)
class Split:
    """An encoded event without its closing brace, as `head + body + tail`: for a delta, its
    template's prefix, its text's JSON and its template's suffix (`template` set); for any other
    event, the whole of it in `head`."""

    head: str
    body: str = ""
    tail: str = ""
    template: int | None = None


def split(event: dict[str, Any], encoded: str) -> Split:
    whole = Split(encoded[:-1])
    code = _TYPE_CODES.get(event["type"])
    delta = event.get("delta")
    if code is None or not isinstance(delta, str) or event.get("logprobs"):
        return whole
    output_index = event.get("output_index", 0)
    sub_index = event.get("content_index", event.get("summary_index", 0))
    if not (_valid(output_index, _OUTPUT_INDEX_LIMIT) and _valid(sub_index, _SUB_INDEX_LIMIT)):
        return whole
    body = orjson.dumps(delta).decode()
    at = encoded.find(_DELTA_KEY + body)
    if at < 0:
        return whole
    end = at + len(_DELTA_KEY) + len(body)
    template = (output_index * _SUB_INDEX_LIMIT + sub_index) * 8 + code
    return Split(encoded[: at + len(_DELTA_KEY)], body, encoded[end:-1], template)


def _valid(index: Any, limit: int) -> bool:
    return type(index) is int and 0 <= index < limit

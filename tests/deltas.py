"""A text delta as a generation hands it to the event writer (before it is numbered)."""

from __future__ import annotations

from typing import Any


def text_delta(words: Any, item_id: str = "msg_1", output_index: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": 0,
        "delta": words,
        "logprobs": [],
        **fields,
    }

"""Folding a response's event log back into its output items: what a running response has
produced so far (OpenAI shows partial output when a background response is polled)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

Event = dict[str, Any]
Item = dict[str, Any]


def output_so_far(events: Iterable[Event]) -> list[Item]:
    items: dict[int, Item] = {}
    for event in events:
        kind = event["type"]
        if kind in ("response.output_item.added", "response.output_item.done"):
            items[event["output_index"]] = copy.deepcopy(event["item"])
        elif kind == "response.content_part.added":
            part = dict(event["part"])
            if "logprobs" in part:  # its own list: deltas extend it
                part["logprobs"] = list(part["logprobs"])
            items[event["output_index"]].setdefault("content", []).append(part)
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            part = items[event["output_index"]]["content"][event["content_index"]]
            part["text"] += event["delta"]
            if event.get("logprobs"):
                part.setdefault("logprobs", []).extend(event["logprobs"])
        elif kind == "response.reasoning_summary_part.added":
            items[event["output_index"]]["summary"].append(dict(event["part"]))
        elif kind == "response.reasoning_summary_text.delta":
            items[event["output_index"]]["summary"][event["summary_index"]]["text"] += event["delta"]
        elif kind == "response.function_call_arguments.delta":
            items[event["output_index"]]["arguments"] += event["delta"]
        elif kind == "response.custom_tool_call_input.delta":
            items[event["output_index"]]["input"] += event["delta"]
    return [items[index] for index in sorted(items)]


def stopped(output: list[Item]) -> list[Item]:
    """The output so far of a response that stopped before its end: the item it was still
    writing marked incomplete."""
    return [{**item, "status": "incomplete"} if item.get("status") == "in_progress" else item for item in output]

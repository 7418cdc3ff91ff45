"""Folding a response's event log back into its output items: what a running response has
produced so far (OpenAI shows partial output when a background response is polled)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.hosted_calls import CALL_TYPES, runs_tools
from app.protocol.shapes import Event, Item
from app.protocol.vocabulary import DELTA_TARGETS


def output_so_far(events: Iterable[Event], start: Sequence[Item] = ()) -> list[Item]:
    """The output after `events`, folded onto `start` (the output after the events before them).
    Each growing text is kept in pieces and joined once: adding to one string per delta copied
    it every time (quadratic in a long answer's deltas)."""
    items: dict[int, Item] = {index: copy.deepcopy(item) for index, item in enumerate(start)}
    pieces: dict[tuple[int, int], _Growing] = {}  # by output index and holder
    for event in events:
        kind = event["type"]
        if kind in ("response.output_item.added", "response.output_item.done"):
            index = event["output_index"]
            _join(pieces, index)  # (the item is replaced whole)
            items[index] = copy.deepcopy(event["item"])
        elif kind == "response.content_part.added":
            part = dict(event["part"])
            if "logprobs" in part:  # its own list: deltas extend it
                part["logprobs"] = list(part["logprobs"])
            items[event["output_index"]].setdefault("content", []).append(part)
        elif kind == "response.reasoning_summary_part.added":
            items[event["output_index"]]["summary"].append(dict(event["part"]))
        elif kind == "response.mcp_call.in_progress":  # its arguments are whole: the server calls it now
            items[event["output_index"]]["status"] = "calling"
        elif kind == "response.mcp_call_arguments.done":
            items[event["output_index"]]["arguments"] = event["arguments"]
        elif kind == "response.output_text.annotation.added":
            part = items[event["output_index"]]["content"][event["content_index"]]
            part["annotations"] = [*part.get("annotations", []), event["annotation"]]
        elif kind in DELTA_TARGETS:
            where, field = DELTA_TARGETS[kind]
            index = event["output_index"]
            holder = items[index] if where is None else items[index][where[0]][event[where[1]]]
            growing = pieces.setdefault((index, id(holder)), _Growing(holder, field, [holder[field]]))
            growing.pieces.append(event["delta"])
            if event.get("logprobs"):
                holder.setdefault("logprobs", []).extend(event["logprobs"])
    _join(pieces, None)
    return [items[index] for index in sorted(items)]


@dataclass(frozen=True, slots=True)
class _Growing:
    holder: dict[str, Any]  # the item or part whose text grows
    field: str
    pieces: list[str]


def _join(pieces: dict[tuple[int, int], _Growing], index: int | None) -> None:
    """Writes the grown texts back into their holders: all, or those of one item."""
    for key in [k for k in pieces if index is None or k[0] == index]:
        growing = pieces.pop(key)
        growing.holder[growing.field] = "".join(growing.pieces)


def stopped(output: list[Item]) -> list[Item]:
    """The output so far of a response that stopped before its end: the item it was still
    writing marked incomplete."""
    return [{**item, "status": "incomplete"} if item.get("status") == "in_progress" else item for item in output]


def continuable(output: list[Item], settings: dict[str, Any]) -> bool:
    """Whether a generation cut short after this output can be continued by another worker:
    before any output (it starts afresh: nothing of it was seen), or inside the text of its one
    message, which the model is then given to go on from. Not inside reasoning or a tool call,
    not past a finished item, and not text held to a schema (the server would hold the
    continuation to the schema from its start).

    A response whose tool loop the server runs (MCP tools, file and web searches) may also be cut
    between its steps: after the finished items of its earlier answers and calls, it goes on with
    a call in flight (made again or failed: workers/tool_loop/loop.py), the text of the message
    being written, or the next answer."""
    if not output:
        return True
    *before, last = output
    if runs_tools(settings):
        if not all(_finished_step(item) for item in before):
            return False
        if last.get("type") in ("mcp_list_tools", "tool_search_output", *CALL_TYPES):
            return True  # between two steps, or with a call in flight
    elif before:
        return False
    return _text_being_written(last, settings)


def _text_being_written(item: Item, settings: dict[str, Any]) -> bool:
    return (
        settings["text"]["format"]["type"] == "text"
        and item.get("type") == "message"
        and item.get("status") == "in_progress"
        and [part.get("type") for part in item.get("content", [])] == ["output_text"]
    )


def _finished_step(item: Item) -> bool:
    """A step of a tool loop that ended: a listed server, a call that answered, or an item of an
    earlier answer of the model's."""
    kind = item.get("type")
    if kind in ("mcp_list_tools", "tool_search_output"):
        return True  # (its events are written together, once the server answered)
    if kind in CALL_TYPES:
        return item.get("status") in ("completed", "failed")
    if kind == "message":
        return item.get("status") == "completed"
    return kind == "reasoning"  # (one followed by another item: finished)

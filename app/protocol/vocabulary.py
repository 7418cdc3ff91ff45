"""The one vocabulary of a response's life: its statuses and the kinds of events it emits.

Every module that asks "has it ended?", "is this a token?" or "may these two deltas merge?"
asks it of these sets, so that a new event type or status is added in one place.
"""

from __future__ import annotations

from typing import Literal

Status = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("queued", "in_progress", "completed", "incomplete", "failed", "cancelled")
ACTIVE_STATUSES: tuple[Status, ...] = ("queued", "in_progress")
TERMINAL_STATUSES: tuple[Status, ...] = ("completed", "incomplete", "failed", "cancelled")

TERMINAL_EVENT_FOR: dict[Status, str] = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    # OpenAI documents no event for this; ours lets a follower end with the cancelled response.
    "cancelled": "response.cancelled",
}
TERMINAL_EVENT_TYPES = frozenset(TERMINAL_EVENT_FOR.values())

# The events that carry generated tokens, and the field of the item (or of its content or summary
# part: the list and the event's index into it) that each one grows. The first of them in a
# response is its first token.
DELTA_TARGETS: dict[str, tuple[tuple[str, str] | None, str]] = {
    "response.output_text.delta": (("content", "content_index"), "text"),
    "response.reasoning_text.delta": (("content", "content_index"), "text"),
    "response.reasoning_summary_text.delta": (("summary", "summary_index"), "text"),
    "response.function_call_arguments.delta": (None, "arguments"),
    "response.custom_tool_call_input.delta": (None, "input"),
}
OUTPUT_DELTAS = frozenset(DELTA_TARGETS)
# Deltas that merge with the one before them while both wait for the same commit (a custom tool
# call's input comes in one delta, once the call is whole).
MERGEABLE_DELTAS = OUTPUT_DELTAS - {"response.custom_tool_call_input.delta"}

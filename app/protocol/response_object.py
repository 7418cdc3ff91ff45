"""The Response object: what create, retrieve, cancel and every lifecycle event carry.

Every field is present, null rather than omitted, in the order OpenAI emits them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from app.protocol.search_results import output_shown
from app.protocol.vocabulary import TERMINAL_STATUSES, Status


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """One response as stored (or, for store=false, as carried by its job)."""

    id: str
    model: str
    status: Status
    created_at: float
    instructions: str | None
    previous_response_id: str | None
    settings: dict[str, Any]
    metadata: dict[str, str]
    store: bool
    background: bool
    stream: bool
    completed_at: float | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    # Not part of the Response object: retention removed its event log (it can't be streamed back).
    events_purged: bool = False

    def evolve(self, **changes: Any) -> ResponseRecord:
        return replace(self, **changes)

    @property
    def include(self) -> list[str]:
        """What its create asked `include` to add."""
        included: list[str] = self.settings.get("requested", {}).get("include") or []
        return included

    @property
    def durable(self) -> bool:
        """In Postgres: stored responses, and background ones for their polling window even with
        store=false. Only a foreground store=false response is transient: it lives in its job and
        on Redis alone (and is counted against no limit)."""
        return self.store or self.background


def render(record: ResponseRecord, include: Collection[str] = ()) -> dict[str, Any]:
    """The Response object; `include`: what the read asks for beside its create's `include`."""
    s = record.settings
    # `conversation` only for a response in one, as OpenAI's traffic shows it.
    conversation = {"conversation": s["conversation"]} if s.get("conversation") else {}
    return {
        "id": record.id,
        "object": "response",
        "created_at": int(record.created_at),
        "status": record.status,
        "background": record.background,
        # OpenAI sets completed_at for completed responses only.
        "completed_at": int(record.completed_at) if record.completed_at and record.status == "completed" else None,
        **conversation,
        "error": record.error,
        "frequency_penalty": s["frequency_penalty"],
        "incomplete_details": record.incomplete_details,
        "instructions": record.instructions,
        "max_output_tokens": s["max_output_tokens"],
        "max_tool_calls": s["max_tool_calls"],
        "model": record.model,
        "output": output_shown(record.output, [*record.include, *include]),
        "parallel_tool_calls": s["parallel_tool_calls"],
        "presence_penalty": s["presence_penalty"],
        "previous_response_id": record.previous_response_id,
        "prompt_cache_key": s["prompt_cache_key"],
        "prompt_cache_retention": s["prompt_cache_retention"],
        "reasoning": s["reasoning"],
        "safety_identifier": s["safety_identifier"],
        "service_tier": _service_tier(s["service_tier"], record.status),
        "store": record.store,
        "temperature": s["temperature"],
        "text": s["text"],
        "tool_choice": s["tool_choice"],
        "tools": s["tools"],
        "top_logprobs": s["top_logprobs"],
        "top_p": s["top_p"],
        "truncation": s["truncation"],
        "usage": record.usage,
        "user": s["user"],
        "metadata": record.metadata,
        # Fields of OpenAI's newer Responses: what was asked (responses stored before them, null),
        # or null for what this server never does (moderation, prompt templates, input
        # transformations, cache diagnostics, hosted-tool usage).
        "access_programs": s.get("access_programs"),
        "image": s.get("image"),
        "prompt_cache_options": s.get("prompt_cache_options"),
        "moderation": None,
        "prompt": None,
        "input_transformations": None,
        "prompt_cache_diagnostics": None,
        "tool_usage": None,
    }


def _service_tier(requested: str, status: Status) -> str:
    """As OpenAI reports it: `auto` until the response is done, then the tier it ran on (here
    always `default`); a tier asked for by name is echoed as asked."""
    return "default" if requested == "auto" and status in TERMINAL_STATUSES else requested


def usage_object(
    input_tokens: int, output_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }

"""Admission: a create is refused with 429 when its account is over its requests or tokens per
minute or its concurrent responses, or its model's queue is full, before anything is stored.

The limits are an account's (`responses-server limits set`, kept in PostgreSQL with the account
and read by the authentication statement, so a request with no limits costs nothing here). The
per-minute counts are Redis counters per account and fixed window (app/queue/rate_counters.py;
`RESPONSES_LIMIT_WINDOW_SECONDS`, a minute). A request's tokens are estimated at admission (its
body's bytes / 4, plus the output it may ask for) and settled with its real usage when it ends,
in the window it was admitted in. An account's `max_concurrent` caps its stored and background
responses queued or running, and a model's `max_queued` its responses waiting for a worker: both
counted in PostgreSQL, so a worker that dies leaves no count behind (creates arriving in the same
instant may pass a cap together).
The answer follows OpenAI's: code `rate_limit_exceeded` naming the limit, `Retry-After`, and the
`x-ratelimit-*` headers, which every create of a limited account carries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.asyncio import Redis

from app import errors
from app.catalog import ModelEntry
from app.protocol.response_object import ResponseRecord
from app.queue import rate_counters
from app.queue.redis_link import REDIS_LINK
from app.service.state import AppState
from app.storage import responses as responses_db
from app.storage.accounts import Limits


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a limited account's create carries: its headers, and where to settle its tokens."""

    headers: dict[str, str]
    tokens_key: str | None = None
    estimate: int = 0


class RateLimited(errors.APIError):
    status_code = 429
    type = "requests"
    code = "rate_limit_exceeded"

    def __init__(
        self, message: str, retry_after: int, headers: dict[str, str], kind: str, code: str = "rate_limit_exceeded"
    ) -> None:
        super().__init__(message, code=code)
        self.type = kind
        self._headers = {**headers, "retry-after": str(retry_after)}

    def headers(self) -> dict[str, str]:
        return self._headers


def estimate_tokens(body_bytes: int, max_output_tokens: int) -> int:
    """OpenAI's rule of thumb: a token is about four bytes of input; the output as asked for."""
    return math.ceil(body_bytes / 4) + max_output_tokens


def check_concurrency(active: int, limits: Limits) -> None:
    """Refuses a create of an account with as many responses queued or running as it may have."""
    if limits.max_concurrent is not None and active >= limits.max_concurrent:
        raise RateLimited(
            f"Concurrency limit reached: {active} responses of this account are queued or running, "
            f"the limit is {limits.max_concurrent}. Please try again when one has ended.",
            1,
            {},
            "requests",
        )


def check_queue(queued: int, max_queued: int | None) -> None:
    """Refuses a create for a model whose queue is full."""
    if max_queued is not None and queued >= max_queued:
        raise RateLimited(
            f"The queue of this model is full ({max_queued} responses waiting); please try again shortly.",
            1,
            {},
            "server_error",
            code="queue_full",
        )


async def _counted(redis: Redis, account_id: str, limits: Limits, estimate: int, window_seconds: int) -> Admitted:
    """Counts the create against its account's window, or refuses it (RateLimited)."""
    if not limits.any:
        return Admitted({})
    counted = await rate_counters.count(
        redis, account_id, window_seconds, limits.requests_per_minute or 0, limits.tokens_per_minute or 0, estimate
    )
    requests, tokens, reset = counted.requests, counted.tokens, counted.reset
    headers = _headers(limits, requests, tokens, reset)
    if counted.refused == "requests":
        raise RateLimited(
            f"Rate limit reached for requests: limit {limits.requests_per_minute} per minute, used {requests}. "
            f"Please try again in {reset}s.",
            reset,
            headers,
            "requests",
        )
    if counted.refused == "tokens":
        raise RateLimited(
            f"Rate limit reached for tokens: limit {limits.tokens_per_minute} per minute, used {tokens}, "
            f"requested {estimate}. Please try again in {reset}s.",
            reset,
            headers,
            "tokens",
        )
    return Admitted(headers, counted.tokens_key if limits.tokens_per_minute else None, estimate)


def _headers(limits: Limits, requests: int, tokens: int, reset: int) -> dict[str, str]:
    headers: dict[str, str] = {}
    if limits.requests_per_minute:
        headers |= {
            "x-ratelimit-limit-requests": str(limits.requests_per_minute),
            "x-ratelimit-remaining-requests": str(max(0, limits.requests_per_minute - requests)),
            "x-ratelimit-reset-requests": f"{reset}s",
        }
    if limits.tokens_per_minute:
        headers |= {
            "x-ratelimit-limit-tokens": str(limits.tokens_per_minute),
            "x-ratelimit-remaining-tokens": str(max(0, limits.tokens_per_minute - tokens)),
            "x-ratelimit-reset-tokens": f"{reset}s",
        }
    return headers


def counts_stored(record: ResponseRecord, model: ModelEntry, limits: Limits | None) -> bool:
    """Whether the create is admitted by counting stored responses (its account's running ones, its
    model's queued ones): then a create that follows counts it only once it is stored."""
    limited = model.max_queued is not None or (limits is not None and limits.max_concurrent is not None)
    return record.durable and limited


async def admit(
    state: AppState,
    account_id: str,
    record: ResponseRecord,
    model: ModelEntry,
    limits: Limits | None,
    body_bytes: int,
) -> dict[str, str]:
    """Refuses the create (429) over its account's limits or its model's queue, counting the
    refusal for the console; returns the rate-limit headers its answer carries."""
    try:
        if limits is None:
            return {}
        if counts_stored(record, model, limits):
            async with state.engine.connect() as conn:
                if limits.max_concurrent is not None:
                    check_concurrency(await responses_db.count_active(conn, account_id), limits)
                if model.max_queued is not None:
                    check_queue(await responses_db.count_queued(conn, model.id), model.max_queued)
        if not limits.any:
            return {}
        requested = record.settings["requested"]["max_output_tokens"]
        output = min(requested or model.max_output_tokens, model.max_output_tokens)
        estimate = estimate_tokens(body_bytes, output)
        admitted = await _counted(state.redis, account_id, limits, estimate, state.settings.limit_window_seconds)
        if admitted.tokens_key is not None:  # its worker puts the real count in place of the estimate
            record.settings["admission"] = {"tokens_key": admitted.tokens_key, "estimate": admitted.estimate}
        return admitted.headers
    except RateLimited:
        with REDIS_LINK.tolerated("counting a refusal"):
            await rate_counters.count_refusal(state.redis, account_id)
        raise

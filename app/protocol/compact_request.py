"""The body of `POST /v1/responses/compact`: OpenAI's parameters, checked as a create's are, and
made the create request of the response that holds the compaction."""

from __future__ import annotations

from typing import Any

from app import errors
from app.protocol.validation import StrictModel, validate


class _Compact(StrictModel):
    # Their values are checked as a create's (app/protocol/create_request.py).
    model: Any
    input: Any = None
    instructions: Any = None
    previous_response_id: Any = None
    prompt_cache_key: Any = None
    prompt_cache_retention: Any = None
    prompt_cache_options: Any = None
    service_tier: Any = None
    safety_identifier: Any = None
    image: Any = None


def as_create(body: dict[str, Any]) -> dict[str, Any]:
    """The create request of the response that compacts `input` (after the chain of
    `previous_response_id`): stored, answered when it ends."""
    compact = validate(_Compact, body)
    if compact.input is None and compact.previous_response_id is None:
        raise errors.InvalidRequest(
            "Missing required parameter: either 'input' or 'previous_response_id' must be provided.",
            param="input",
            code="missing_required_parameter",
        )
    given = {name: value for name, value in compact.model_dump().items() if value is not None}
    return {**given, "store": True}

"""Reading requests: the JSON body (size and type checked) and typed query parameters."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from app import errors


async def json_body(request: Request, max_bytes: int) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "")
    if "application/json" not in content_type.lower():
        raise errors.UnsupportedMediaType(
            f"Unsupported Content-Type '{content_type or '(none)'}': send the body as application/json."
        )
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > max_bytes:
            raise _too_large(max_bytes)
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise errors.InvalidRequest(
            "We could not parse the JSON body of your request. The body must be valid JSON.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise errors.InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


def _too_large(max_bytes: int) -> errors.PayloadTooLarge:
    return errors.PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise errors.InvalidRequest(
        f"Invalid '{name}': expected true or false, got '{value}'.", param=name, code="invalid_value"
    )


def query_int(
    request: Request,
    name: str,
    *,
    default: int | None,
    low: int,
    high: int | None = None,
) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise errors.InvalidRequest(
            f"Invalid '{name}': expected an integer {bounds}, got '{value}'.", param=name, code="invalid_value"
        )
    return number


def query_choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name) or default
    if value not in choices:
        raise errors.InvalidRequest(
            f"Invalid '{name}': expected one of {', '.join(choices)}, got '{value}'.", param=name, code="invalid_value"
        )
    return value

"""Reading requests: the JSON body (size and type checked), typed query parameters and path ids.

The body is strict JSON (RFC 8259, as OpenAI's): no NaN or Infinity, which Postgres's JSON
cannot hold either, and no lone surrogate. Postgres text cannot hold the NUL character, so no
stored value contains one: a body string with it is refused naming where it is, and an id with
it names nothing (404, as unknown ids). Nesting is bounded: validating, encoding and storing a
body recurse into it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from app import errors
from app.process import request_log
from app.protocol.validation import INT32_MAX


@dataclass(frozen=True, slots=True)
class JsonBody:
    data: dict[str, Any]
    size: int  # in bytes, as sent (admission estimates a request's tokens from it)


async def json_body(request: Request, max_bytes: int) -> JsonBody:
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
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise errors.InvalidRequest(
            "We could not parse the JSON body of your request. The body must be valid JSON.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise errors.InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    # JSON carries NUL only escaped, and cannot nest deeper than it has brackets: two scans of
    # the bytes spare the walk for nearly every body.
    if b"\\u0000" in raw or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        if (found := _refused_at(body, "", 1)) is not None:
            where, what = found
            raise errors.InvalidRequest(f"Invalid '{where}': {what}.", param=where, code="invalid_value")
    return JsonBody(body, len(raw))


MAX_DEPTH = 100  # levels of objects and arrays, the body's own included


def _refused_at(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    """The path (in the API's notation: `input[0].content[0].text`, `metadata.topic`) of the first
    string or key holding a NUL character, or of the first value nested too deep, and why."""
    if isinstance(value, str):
        return (path, "text cannot contain the NUL character (\\u0000)") if "\x00" in value else None
    if isinstance(value, dict):
        children = [(f"{path}.{key}" if path else key, key, child) for key, child in value.items()]
    elif isinstance(value, list):
        children = [(f"{path}[{index}]", "", child) for index, child in enumerate(value)]
    else:
        return None
    if depth > MAX_DEPTH:
        return path, f"nested more than {MAX_DEPTH} levels deep"
    for child_path, key, child in children:
        if "\x00" in key:
            return child_path, "text cannot contain the NUL character (\\u0000)"
        if (found := _refused_at(child, child_path, depth + 1)) is not None:
            return found
    return None


def response_id_in_path(request: Request) -> str:
    response_id: str = request.path_params["response_id"]
    if "\x00" in response_id:
        raise errors.response_not_found(response_id)
    request_log.note(response_id=response_id)
    return response_id


def _too_large(max_bytes: int) -> errors.PayloadTooLarge:
    return errors.PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")


def query_include(request: Request) -> list[str]:
    """`include`, as the SDK sends a list in a query (`include[]=…`) or repeated."""
    return request.query_params.getlist("include[]") + request.query_params.getlist("include")


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


_INTEGER = re.compile(r"-?[0-9]{1,18}")


def query_int(
    request: Request,
    name: str,
    *,
    default: int | None,
    low: int,
    high: int = INT32_MAX,
) -> int | None:
    """The parameter as an integer in [low, high] (by default what a Postgres integer holds)."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    # ASCII digits only: Python's int() also takes other scripts' digits, underscores and spaces.
    number = int(value) if _INTEGER.fullmatch(value) else None
    if number is None or number < low or number > high:
        raise errors.InvalidRequest(
            f"Invalid '{name}': expected an integer between {low} and {high}, got '{value}'.",
            param=name,
            code="invalid_value",
        )
    return number


def query_choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name) or default
    if value not in choices:
        raise errors.InvalidRequest(
            f"Invalid '{name}': expected one of {', '.join(choices)}, got '{value}'.", param=name, code="invalid_value"
        )
    return value

"""Attribute filters, as `file_search` and a vector store's search take them: a comparison
(`{type: eq|ne|gt|gte|lt|lte|in|nin, key, value}`) or a compound (`{type: and|or, filters}`),
checked into frozen values (a 400 naming the parameter at fault) for the storage to turn into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import errors

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 8
MAX_KEY = 64

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Comparison:
    op: str
    key: str
    value: Scalar | tuple[str | int | float, ...]


@dataclass(frozen=True, slots=True)
class Compound:
    op: str
    filters: tuple[Comparison | Compound, ...]


Filter = Comparison | Compound


def parse_filter(raw: Any, param: str, depth: int = 1) -> Filter:
    if not isinstance(raw, dict):
        raise _invalid(param, "expected an object")
    kind = raw.get("type")
    if kind in COMPOUNDS:
        return _compound(raw, param, depth)
    if kind in COMPARISONS:
        return _comparison(raw, param)
    raise _invalid(f"{param}.type", f"expected one of {', '.join(COMPARISONS + COMPOUNDS)}, got {kind!r}")


def _compound(raw: dict[str, Any], param: str, depth: int) -> Compound:
    if set(raw) - {"type", "filters"}:
        raise _invalid(param, f"unknown field '{sorted(set(raw) - {'type', 'filters'})[0]}'")
    if depth >= MAX_DEPTH:
        raise _invalid(param, f"filters nest at most {MAX_DEPTH} levels deep")
    filters = raw.get("filters")
    if not isinstance(filters, list) or not filters:
        raise _invalid(f"{param}.filters", "expected a non-empty array of filters")
    parsed = tuple(parse_filter(item, f"{param}.filters[{i}]", depth + 1) for i, item in enumerate(filters))
    return Compound(raw["type"], parsed)


def _comparison(raw: dict[str, Any], param: str) -> Comparison:
    if set(raw) - {"type", "key", "value"}:
        raise _invalid(param, f"unknown field '{sorted(set(raw) - {'type', 'key', 'value'})[0]}'")
    key, value, op = raw.get("key"), raw.get("value"), raw["type"]
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise _invalid(f"{param}.key", f"expected a string of 1 to {MAX_KEY} characters")
    if op in ("in", "nin"):
        if not isinstance(value, list) or not value:
            raise _invalid(f"{param}.value", f"'{op}' takes a non-empty array of strings or numbers")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise _invalid(f"{param}.value", f"'{op}' takes an array of strings or numbers")
        return Comparison(op, key, tuple(value))
    if not isinstance(value, str | int | float | bool):
        raise _invalid(f"{param}.value", "expected a string, number or boolean")
    if op in ("gt", "gte", "lt", "lte") and isinstance(value, bool):
        raise _invalid(f"{param}.value", f"'{op}' compares numbers or strings, not booleans")
    return Comparison(op, key, value)


def _invalid(param: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"Invalid '{param}': {why}.", param=param, code="invalid_value")

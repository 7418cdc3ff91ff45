"""Turning pydantic validation failures into OpenAI-style 400s that name the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError

from app import errors


class StrictModel(BaseModel):
    """A part of a request: no parameter we do not know (400 unknown_parameter), no coercion
    (a string is not a number), as OpenAI's API refuses them."""

    model_config = ConfigDict(extra="forbid", strict=True)


ModelT = TypeVar("ModelT", bound=BaseModel)

INT32_MAX = 2**31 - 1  # the largest count a Postgres integer (and a runtime's int32) holds


def param_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """('input', 0, 'content') -> 'input[0].content'."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def validate(model: type[ModelT], data: Mapping[str, Any], prefix: str = "") -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        # Drop pydantic's union-branch labels such as 'str' or 'list[...]' from the location.
        loc = tuple(p for p in first["loc"] if isinstance(p, int) or ("[" not in p and p not in ("str",)))
        param = param_path(loc, prefix)
        if first["type"] == "missing":
            raise errors.InvalidRequest(
                f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
            ) from None
        if first["type"] == "extra_forbidden":
            raise errors.InvalidRequest(
                f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter"
            ) from None
        raise errors.InvalidRequest(f"Invalid '{param}': {first['msg']}.", param=param, code="invalid_value") from None


def discriminator(raw: Mapping[str, Any], param: str, key: str = "type", default: str | None = None) -> str | None:
    """The field that decides how the rest of `raw` is read (an item's `type`, a message's `role`),
    or a 400 naming it when it holds anything but a string: it is looked up in tables, and an
    object or array there is no value of it (nor a 500)."""
    value = raw.get(key, default)
    if value is None or isinstance(value, str):
        return value
    raise errors.InvalidRequest(
        f"Invalid '{param}.{key}': expected a string, got {type(value).__name__}.",
        param=f"{param}.{key}",
        code="invalid_type",
    )


def check_json_schema(schema: dict[str, Any], param: str) -> None:
    """A 400 naming `param` unless `schema` is a valid JSON Schema (by its own metaschema)."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise errors.InvalidRequest(
            f"Invalid '{param}': not a valid JSON Schema: {exc.message}.", param=param, code="invalid_json_schema"
        ) from None

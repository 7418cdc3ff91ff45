"""OpenAI's strict-mode rules for JSON Schemas (`strict: true` text formats and function tools).

Checked before anything is stored, so a schema guided decoding could not honour is a 400 naming
the schema path rather than output that does not match it. The rules, as OpenAI's Structured
Outputs guide states them: the root is an object (not `anyOf`); every object lists all of its
properties in `required` and has `additionalProperties: false`; only the supported keywords
appear; `$ref` points inside the schema (`#`, `#/$defs/…`, `#/definitions/…`) and every cycle
of references passes through a property or an array's items; and the size limits hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app import errors

SUPPORTED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "description",
        "title",
        "$schema",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
SUPPORTED_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
MAX_PROPERTIES = 5_000
MAX_NESTING = 10
MAX_STRING_CHARS = 120_000
MAX_ENUM_VALUES = 1_000
LARGE_ENUM = 250
MAX_LARGE_ENUM_CHARS = 15_000


class StrictSchemaError(Exception):
    def __init__(self, where: tuple[str, ...], message: str) -> None:
        self.where = where
        super().__init__(message)


def check_strict(schema: dict[str, Any], param: str) -> None:
    """A 400 naming the path in `param` at which `schema` breaks a strict-mode rule."""
    try:
        _Checker(schema).run()
    except StrictSchemaError as exc:
        path = param + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in exc.where)
        raise errors.InvalidRequest(
            f"Invalid schema for strict mode at '{path}': {exc}", param=path, code="invalid_json_schema"
        ) from None


def effective_strict(schema: dict[str, Any], strict: bool | None, param: str) -> bool:
    """A function tool's strict mode: `true` is checked (a 400 when broken); omitted is strict
    where the schema, with every property required and no others allowed, meets the rules, as
    OpenAI falls back to non-strict otherwise."""
    if strict is True:
        check_strict(schema, param)
        return True
    if strict is False:
        return False
    try:
        _Checker(_normalised(schema)).run()
    except StrictSchemaError:
        return False
    return True


def _normalised(schema: Any) -> Any:
    """A copy in which every object requires all its properties and allows no others."""
    if isinstance(schema, list):
        return [_normalised(entry) for entry in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {key: _normalised(value) if key != "enum" and key != "const" else value for key, value in schema.items()}
    if schema.get("type") == "object" or "properties" in schema:
        copy["required"] = list((schema.get("properties") or {}).keys())
        copy["additionalProperties"] = False
    return copy


@dataclass
class _Checker:
    root: dict[str, Any]
    properties: int = 0
    string_chars: int = 0
    enum_values: int = 0
    _refs: set[str] = field(default_factory=set)

    def run(self) -> None:
        if not isinstance(self.root, dict) or self.root.get("type") != "object" or "anyOf" in self.root:
            raise StrictSchemaError((), "the root must be an object schema ('type': 'object'), not 'anyOf'.")
        self._check(self.root, (), 0)
        for keyword in ("$defs", "definitions"):
            for name, definition in (self.root.get(keyword) or {}).items():
                self.string_chars += len(name)
                self._check(definition, (keyword, name), 1)
        self._limit(self.properties <= MAX_PROPERTIES, f"more than {MAX_PROPERTIES} object properties in all.")
        self._limit(
            self.string_chars <= MAX_STRING_CHARS,
            f"more than {MAX_STRING_CHARS} characters of property names, definition names, enum and const values.",
        )
        self._limit(self.enum_values <= MAX_ENUM_VALUES, f"more than {MAX_ENUM_VALUES} enum values in all.")
        for ref in sorted(self._refs):
            self._check_cycle(ref)

    @staticmethod
    def _limit(holds: bool, message: str) -> None:
        if not holds:
            raise StrictSchemaError((), f"the schema has {message}")

    def _check(self, schema: Any, where: tuple[str, ...], depth: int) -> None:
        if not isinstance(schema, dict):
            raise StrictSchemaError(where, "expected a schema object.")
        for keyword in schema:
            if keyword not in SUPPORTED_KEYWORDS:
                raise StrictSchemaError(where, f"'{keyword}' is not supported in strict mode.")
        if "$ref" in schema:
            self._ref(schema["$ref"], where)
        self._type(schema, where)
        if "format" in schema and schema["format"] not in SUPPORTED_FORMATS:
            raise StrictSchemaError(where, f"the format '{schema['format']}' is not supported in strict mode.")
        self._values(schema, where)
        for index, branch in enumerate(schema.get("anyOf") or []):
            self._check(branch, (*where, "anyOf", str(index)), depth)
        if "properties" in schema or schema.get("type") == "object" or "object" in _types(schema):
            self._object(schema, where, depth + 1)
        if "items" in schema:
            self._check(schema["items"], (*where, "items"), depth + 1)

    def _type(self, schema: dict[str, Any], where: tuple[str, ...]) -> None:
        types = _types(schema)
        if any(t not in TYPES for t in types):
            raise StrictSchemaError(where, f"unknown type in {schema['type']!r}.")
        if len([t for t in types if t != "null"]) > 1:
            raise StrictSchemaError(where, "a type list may hold one type besides 'null'; use 'anyOf'.")

    def _object(self, schema: dict[str, Any], where: tuple[str, ...], depth: int) -> None:
        if depth > MAX_NESTING:
            raise StrictSchemaError(where, f"objects are nested more than {MAX_NESTING} levels deep.")
        if schema.get("additionalProperties") is not False:
            raise StrictSchemaError(where, "'additionalProperties' is required to be supplied and to be false.")
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        missing = [name for name in properties if name not in required]
        if missing:
            raise StrictSchemaError(
                where, f"'required' must list every property; missing {', '.join(repr(m) for m in missing)}."
            )
        self.properties += len(properties)
        for name, subschema in properties.items():
            self.string_chars += len(name)
            self._check(subschema, (*where, "properties", name), depth)

    def _values(self, schema: dict[str, Any], where: tuple[str, ...]) -> None:
        if "const" in schema and isinstance(schema["const"], str):
            self.string_chars += len(schema["const"])
        enum = schema.get("enum")
        if enum is None:
            return
        if not isinstance(enum, list):
            raise StrictSchemaError(where, "'enum' must be a list.")
        chars = sum(len(value) for value in enum if isinstance(value, str))
        if len(enum) > LARGE_ENUM and chars > MAX_LARGE_ENUM_CHARS:
            raise StrictSchemaError(
                where, f"an enum of more than {LARGE_ENUM} values has over {MAX_LARGE_ENUM_CHARS} characters."
            )
        self.enum_values += len(enum)
        self.string_chars += chars

    def _ref(self, ref: Any, where: tuple[str, ...]) -> None:
        if not isinstance(ref, str) or _resolve(self.root, ref) is None:
            raise StrictSchemaError(where, f"'$ref' {ref!r} does not point to a schema inside this one.")
        self._refs.add(ref)

    def _check_cycle(self, start: str) -> None:
        """A reference that leads back to itself through references and anyOf alone would
        describe a value without ever consuming one."""
        seen: set[str] = set()
        pending = [start]
        while pending:
            ref = pending.pop()
            if ref in seen:
                if ref == start:
                    raise StrictSchemaError((), f"'$ref' {start!r} refers to itself without consuming a value.")
                continue
            seen.add(ref)
            pending.extend(_direct_refs(_resolve(self.root, ref)))


def _types(schema: dict[str, Any]) -> list[Any]:
    kind = schema.get("type")
    return kind if isinstance(kind, list) else [] if kind is None else [kind]


def _direct_refs(schema: Any) -> Iterator[str]:
    """The references a schema stands for without descending into a property or an item."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$ref"), str):
        yield schema["$ref"]
    for branch in schema.get("anyOf") or []:
        yield from _direct_refs(branch)


def _resolve(root: dict[str, Any], ref: str) -> Any:
    """The schema a local JSON Pointer reference names, or None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or token not in node:
            return None
        node = node[token]
    return node if isinstance(node, dict) else None

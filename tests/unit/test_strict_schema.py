"""OpenAI's strict-mode schema rules: what passes, and the path named for what does not."""

from __future__ import annotations

from typing import Any

import pytest

from app import errors
from app.protocol.strict_schema import check_strict, effective_strict
from app.protocol.tools import parse_tools


def obj(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        **more,
    }


STRING = {"type": "string"}

GOOD = [
    obj({"city": STRING}),
    obj({"city": {"type": ["string", "null"]}, "when": {"type": "string", "format": "date-time"}}),
    obj({"tags": {"type": "array", "items": STRING, "minItems": 1, "maxItems": 3}}),
    obj({"n": {"type": "number", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 0.5}}),
    obj({"kind": {"enum": ["a", "b"]}, "x": {"anyOf": [STRING, {"type": "null"}]}}),
    obj(
        {"node": {"$ref": "#/$defs/node"}},
        **{"$defs": {"node": obj({"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}})}},
    ),
    obj({"child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}),  # root recursion through a property
    obj({"a/b": {"$ref": "#/$defs/a~1b"}}, **{"$defs": {"a/b": STRING}}),
]


@pytest.mark.parametrize("schema", GOOD)
def test_schemas_within_the_rules_pass(schema: dict[str, Any]) -> None:
    check_strict(schema, "text.format.schema")


BAD = [
    ({"type": "array", "items": STRING}, "text.format.schema", "root must be an object"),
    ({"anyOf": [obj({})]}, "text.format.schema", "root must be an object"),
    ({"type": "object", "properties": {"a": STRING}, "required": ["a"]}, "text.format.schema", "additionalProperties"),
    (
        {"type": "object", "properties": {"a": STRING, "b": STRING}, "required": ["a"], "additionalProperties": False},
        "text.format.schema",
        "'b'",
    ),
    (
        obj({"inner": {"type": "object", "properties": {"x": STRING}}}),
        "text.format.schema.properties.inner",
        "additionalProperties",
    ),
    (obj({"name": {"type": "string", "minLength": 1}}), "text.format.schema.properties.name", "'minLength'"),
    (obj({"name": {"type": "string", "default": "x"}}), "text.format.schema.properties.name", "'default'"),
    (obj({"x": {"allOf": [STRING]}}), "text.format.schema.properties.x", "'allOf'"),
    (obj({"x": {"type": "string", "format": "uri"}}), "text.format.schema.properties.x", "format"),
    (obj({"x": {"type": ["string", "integer"]}}), "text.format.schema.properties.x", "type list"),
    (obj({"x": {"$ref": "#/$defs/missing"}}), "text.format.schema.properties.x", "$ref"),
    (obj({"x": {"$ref": "https://example.com/s.json"}}), "text.format.schema.properties.x", "$ref"),
    (
        obj({"items": {"type": "array", "items": [STRING]}}),
        "text.format.schema.properties.items.items",
        "schema object",
    ),
    (
        obj(
            {"x": {"$ref": "#/$defs/a"}},
            **{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
        ),
        "text.format.schema",
        "itself",
    ),
    (obj({"x": {"enum": [str(n) for n in range(1001)]}}), "text.format.schema", "enum values"),
    (obj({"x": {"enum": ["v" * 100 for _ in range(251)]}}), "text.format.schema.properties.x", "characters"),
    (obj({f"p{n}": STRING for n in range(5001)}), "text.format.schema", "properties"),
]


@pytest.mark.parametrize(("schema", "param", "words"), BAD)
def test_schemas_that_break_a_rule_are_refused_naming_where(schema: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        check_strict(schema, "text.format.schema")
    assert (caught.value.param, caught.value.code) == (param, "invalid_json_schema")
    assert words in caught.value.message


def test_nesting_beyond_ten_objects_is_refused() -> None:
    schema = obj({"leaf": STRING})
    for _ in range(10):
        schema = obj({"inner": schema})
    with pytest.raises(errors.InvalidRequest) as caught:
        check_strict(schema, "s")
    assert "nested" in caught.value.message


def test_omitted_strict_is_strict_where_the_normalised_schema_allows_it() -> None:
    loose = {"type": "object", "properties": {"city": STRING}}  # optional property, others allowed
    assert effective_strict(loose, None, "p") is True
    assert (
        effective_strict({"type": "object", "properties": {"x": {"type": "string", "minLength": 2}}}, None, "p")
        is False
    )
    assert effective_strict(loose, False, "p") is False
    with pytest.raises(errors.InvalidRequest):
        effective_strict(loose, True, "p")


def test_a_strict_function_tool_is_checked_and_its_path_named() -> None:
    tool = {
        "type": "function",
        "name": "f",
        "strict": True,
        "parameters": {"type": "object", "properties": {"a": STRING}},
    }
    with pytest.raises(errors.InvalidRequest) as caught:
        parse_tools([tool])
    assert caught.value.param == "tools[0].parameters"
    assert parse_tools([{**tool, "strict": None}])[0][0]["strict"] is True
    assert parse_tools([{**tool, "strict": False}])[0][0]["strict"] is False

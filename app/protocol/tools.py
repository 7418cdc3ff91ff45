"""`tools` and `tool_choice`: function tools, which the model calls and the client runs.

Hosted tools (web search, file search, code interpreter…) are OpenAI's own services; they are
refused with a 400 naming the tool rather than silently dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app import errors
from app.protocol.validation import check_json_schema, validate

Tool = dict[str, Any]
ToolChoice = str | dict[str, Any]


class _FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["function"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _NamedChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["function"]
    name: str


def parse_tools(raw: list[Any] | None) -> list[Tool]:
    """The tools as a Response echoes them."""
    tools: list[Tool] = []
    for index, entry in enumerate(raw or []):
        param = f"tools[{index}]"
        if not isinstance(entry, dict):
            raise errors.InvalidRequest(f"Invalid '{param}': expected an object.", param=param, code="invalid_type")
        if entry.get("type") != "function":
            raise errors.UnsupportedParameter(f"{param}.type", f"a tool of type '{entry.get('type')}'")
        tool = validate(_FunctionTool, entry, prefix=param)
        if tool.parameters is not None:
            check_json_schema(tool.parameters, f"{param}.parameters")
        if any(known["name"] == tool.name for known in tools):
            raise errors.InvalidRequest(
                f"Invalid '{param}.name': the function '{tool.name}' is listed twice.",
                param=f"{param}.name",
                code="invalid_value",
            )
        tools.append(
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": tool.strict is not False,  # OpenAI's default for Responses function tools
            }
        )
    return tools


def parse_tool_choice(raw: ToolChoice | None, tools: list[Tool]) -> ToolChoice:
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise errors.InvalidRequest(
                f"Invalid 'tool_choice': unknown value '{raw}'; expected 'none', 'auto', 'required' or a function.",
                param="tool_choice",
                code="invalid_value",
            )
        if raw == "required" and not tools:
            raise errors.InvalidRequest(
                "Invalid 'tool_choice': 'required' needs at least one tool.", param="tool_choice", code="invalid_value"
            )
        return raw
    if raw.get("type") != "function":
        raise errors.UnsupportedParameter("tool_choice.type", f"a tool_choice of type '{raw.get('type')}'")
    named = validate(_NamedChoice, raw, prefix="tool_choice")
    if not any(tool["name"] == named.name for tool in tools):
        raise errors.InvalidRequest(
            f"Invalid 'tool_choice.name': no function named '{named.name}' in tools.",
            param="tool_choice.name",
            code="invalid_value",
        )
    return {"type": "function", "name": named.name}

"""Whether a valid request fits the model it names: what that model's catalog entry says it can
take. Checked before anything is stored, like every other 400 (design invariant 6)."""

from __future__ import annotations

from app import errors
from app.catalog import ModelEntry, VllmModel
from app.protocol.create_request import ValidatedCreate


def check_fit(create: ValidatedCreate, model: ModelEntry) -> None:
    kind = create.text_format["type"]
    if kind != "text" and model.structured_output == "none":
        raise errors.InvalidRequest(
            f"Invalid 'text.format.type': the model '{model.id}' does not support '{kind}'.",
            param="text.format.type",
            code="unsupported_value",
        )
    if create.tools and create.tool_choice in ("auto", "required") and not _parses_tool_calls(model):
        raise errors.InvalidRequest(
            f"Invalid 'tool_choice': the model '{model.id}' has no tool_call_parser in the catalog, so it can only "
            "call a tool named in tool_choice.",
            param="tool_choice",
            code="unsupported_value",
        )


def _parses_tool_calls(model: ModelEntry) -> bool:
    """vLLM finds tool calls in free text only with a parser; a named tool_choice needs none
    (it constrains the output to that function's arguments)."""
    return not isinstance(model, VllmModel) or model.tool_call_parser is not None

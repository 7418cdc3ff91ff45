"""Whether a valid request fits the model it names: what that model's catalog entry says it can
take. Checked before anything is stored, like every other 400 (design invariant 6)."""

from __future__ import annotations

from app import errors
from app.catalog import ModelEntry, VllmModel
from app.protocol.create_request import ValidatedCreate
from app.protocol.input_items import image_count
from app.protocol.tools import grammar_of


def check_fit(create: ValidatedCreate, model: ModelEntry) -> None:
    _check_reasoning(create, model)
    _check_grammars(create, model)
    if create.logprobs and not model.logprobs:
        param = "top_logprobs" if create.request.top_logprobs else "include"
        raise errors.InvalidRequest(
            f"Invalid '{param}': the model '{model.id}' does not return log probabilities.",
            param=param,
            code="unsupported_value",
        )
    images = image_count(create.input_items)
    if images > model.max_images:
        raise errors.InvalidRequest(
            f"Invalid 'input': {images} images; the model '{model.id}' takes at most {model.max_images} per request.",
            param="input",
            code="too_many_images",
        )
    kind = create.text_format["type"]
    if kind != "text" and model.structured_output == "none":
        raise errors.InvalidRequest(
            f"Invalid 'text.format.type': the model '{model.id}' does not support '{kind}'.",
            param="text.format.type",
            code="unsupported_value",
        )
    if _offers_tools(create) and not _parses_tool_calls(model):
        raise errors.InvalidRequest(
            f"Invalid 'tool_choice': the model '{model.id}' has no tool_call_parser in the catalog, so it cannot "
            "call tools; only tool_choice 'none' is accepted with tools.",
            param="tool_choice",
            code="unsupported_value",
        )


def _check_grammars(create: ValidatedCreate, model: ModelEntry) -> None:
    """A grammar is held by the model's server over the whole answer: so a custom tool with one is
    served when that server can, and tool_choice names the tool (its answer is then the input)."""
    for index, tool in enumerate(create.tools):
        members = [(f"tools[{index}]", tool)]
        if tool["type"] == "namespace":
            members = [(f"tools[{index}].tools[{n}]", member) for n, member in enumerate(tool["tools"])]
        for param, member in members:
            if grammar_of(member) is None:
                continue
            if model.grammar is None:
                reason = f"the model '{model.id}' cannot hold its output to a grammar (catalog `grammar`)"
            elif member is not tool:
                reason = "a tool with a grammar cannot be in a namespace"
            elif create.tool_choice != {"type": "custom", "name": member["name"]}:
                reason = (
                    "a grammar holds the model's whole answer, so tool_choice must name this tool: "
                    f"{{'type': 'custom', 'name': '{member['name']}'}}"
                )
            else:
                continue
            raise errors.InvalidRequest(
                f"Invalid '{param}.format': {reason}.", param=f"{param}.format", code="unsupported_value"
            )


def _offers_tools(create: ValidatedCreate) -> bool:
    """Whether the model is offered functions to call: a custom tool with a grammar named in
    tool_choice is not one (the grammar holds the whole answer, which is its input)."""
    choice = create.tool_choice
    if not create.tools or choice == "none":
        return False
    if isinstance(choice, dict) and choice.get("type") == "custom":
        return not any(t.get("name") == choice["name"] and grammar_of(t) for t in create.tools)
    return True


def _parses_tool_calls(model: ModelEntry) -> bool:
    """vLLM takes tools only with a parser (0.32: every tool_choice but "none", a named one too, is
    a 400 without `--tool-call-parser`)."""
    return not isinstance(model, VllmModel) or model.tool_call_parser is not None


def _check_reasoning(create: ValidatedCreate, model: ModelEntry) -> None:
    effort = create.request.reasoning.effort if create.request.reasoning else None
    if effort is None or (effort == "none" and model.reasoning is None):
        return
    if model.reasoning is None:
        raise errors.InvalidRequest(
            f"Invalid 'reasoning.effort': the model '{model.id}' does not reason.",
            param="reasoning.effort",
            code="unsupported_value",
        )
    if effort not in model.reasoning.efforts:
        accepted = ", ".join(f"'{e}'" for e in model.reasoning.efforts)
        raise errors.InvalidRequest(
            f"Invalid 'reasoning.effort': the model '{model.id}' takes {accepted}, not '{effort}'.",
            param="reasoning.effort",
            code="unsupported_value",
        )

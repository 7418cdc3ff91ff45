"""The `input` of a create request, normalised to the item shapes that are stored and listed.

A string becomes one user message; every message's content becomes a list of parts. Ids are
assigned when the items are stored, never taken from the client (a replayed output item keeps
its content but gets a fresh id), so every listed item has one stable id of ours. A replayed
`mcp_approval_request` keeps the client's id until then: an `mcp_approval_response` beside it
names it (app/storage/items.py `with_new_ids`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from app import errors
from app.protocol import client_tools
from app.protocol.input_files import part_text
from app.protocol.shapes import Item, Tool
from app.protocol.tools import parse_tools
from app.protocol.validation import StrictModel, discriminator, validate

# A call the model makes, and the item that answers it (by call_id): a function's or a custom
# tool's, whose output is text or content parts, and a typed client tool's (app/protocol/client_tools.py).
TOOL_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
# (A tool_search_call counts as the client's where its execution is the client's.)
CLIENT_CALL_TYPES = ("function_call", "custom_tool_call", *client_tools.CALL_TYPES, "tool_search_call")
CLIENT_OUTPUT_TYPES = (*TOOL_OUTPUT_TYPES, *client_tools.OUTPUT_TYPES, "tool_search_output")
# What a client sends to answer a response that waits for it.
ANSWER_TYPES = (*CLIENT_OUTPUT_TYPES, "mcp_approval_response")

# Known to OpenAI, not served here yet: a clear 400 rather than a silent drop.
UNSUPPORTED_CONTENT_TYPES = {"input_audio"}
UNSUPPORTED_ITEM_TYPES = {
    "compaction_trigger",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
}


class _Message(StrictModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class _FunctionCall(StrictModel):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _CustomToolCall(StrictModel):
    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None
    id: str | None = None


class _ToolOutput(StrictModel):
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str = Field(min_length=1, max_length=64)
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _Reasoning(StrictModel):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]]
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _Compaction(StrictModel):
    type: Literal["compaction"]
    encrypted_content: str = Field(min_length=1)
    id: str | None = None
    created_by: str | None = None


class _McpListedTool(StrictModel):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class _McpListTools(StrictModel):
    type: Literal["mcp_list_tools"]
    server_label: str
    tools: list[_McpListedTool]
    id: str | None = None
    error: str | None = None


class _McpCall(StrictModel):
    type: Literal["mcp_call"]
    server_label: str
    name: str
    arguments: str
    id: str | None = None
    output: str | None = None
    error: str | dict[str, Any] | None = None
    approval_request_id: str | None = None
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] | None = None


class _FileSearchResult(StrictModel):
    file_id: str | None = None
    filename: str | None = None
    score: float | None = None
    text: str | None = None
    attributes: dict[str, Any] | None = None


class _ItemReference(StrictModel):
    type: Literal["item_reference"] | None = None
    id: str = Field(min_length=1, max_length=256)


class _Source(StrictModel):
    type: Literal["url"] = "url"
    url: str


class _SearchAction(StrictModel):
    type: Literal["search"]
    query: str | None = None
    queries: list[str] | None = None
    sources: list[_Source] | None = None


class _OpenPageAction(StrictModel):
    type: Literal["open_page"]
    url: str | None = None


class _FindInPageAction(StrictModel):
    type: Literal["find_in_page", "find"]  # (`find`: what older servers wrote)
    url: str | None = None
    pattern: str | None = None


class _WebResult(StrictModel):
    url: str
    title: str = ""
    snippet: str = ""


class _WebSearchCall(StrictModel):
    type: Literal["web_search_call"]
    action: _SearchAction | _OpenPageAction | _FindInPageAction = Field(discriminator="type")
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"] | None = None
    results: list[_WebResult] | None = None
    id: str | None = None


class _Caller(StrictModel):
    type: Literal["direct", "program"]
    caller_id: str | None = None


class _ShellAction(StrictModel):
    commands: list[str] = Field(min_length=1)
    timeout_ms: int | None = Field(None, ge=1)
    max_output_length: int | None = Field(None, ge=1)


class _ShellCall(StrictModel):
    type: Literal["shell_call"]
    call_id: str = Field(min_length=1, max_length=64)
    action: _ShellAction
    environment: dict[str, Any] | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: _Caller | None = None
    created_by: str | None = None
    id: str | None = None


class _ShellOutcome(StrictModel):
    type: Literal["exit", "timeout"]
    exit_code: int | None = None


class _ShellOutputContent(StrictModel):
    stdout: str = ""
    stderr: str = ""
    outcome: _ShellOutcome
    created_by: str | None = None


class _ShellCallOutput(StrictModel):
    type: Literal["shell_call_output"]
    call_id: str = Field(min_length=1, max_length=64)
    output: list[_ShellOutputContent]
    max_output_length: int | None = Field(None, ge=1)
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    caller: _Caller | None = None
    created_by: str | None = None
    id: str | None = None


class _LocalShellAction(StrictModel):
    type: Literal["exec"] = "exec"
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_ms: int | None = Field(None, ge=1)
    user: str | None = None
    working_directory: str | None = None


class _LocalShellCall(StrictModel):
    type: Literal["local_shell_call"]
    call_id: str = Field(min_length=1, max_length=64)
    action: _LocalShellAction
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    id: str | None = None


class _LocalShellCallOutput(StrictModel):
    type: Literal["local_shell_call_output"]
    output: str
    call_id: str | None = Field(None, min_length=1, max_length=64)
    id: str | None = None  # (OpenAI's schema names the call by `id`; the Agents SDK sends call_id)
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _CreateFile(StrictModel):
    type: Literal["create_file", "update_file"]
    path: str = Field(min_length=1)
    diff: str


class _DeleteFile(StrictModel):
    type: Literal["delete_file"]
    path: str = Field(min_length=1)


class _ApplyPatchCall(StrictModel):
    type: Literal["apply_patch_call"]
    call_id: str = Field(min_length=1, max_length=64)
    operation: _CreateFile | _DeleteFile = Field(discriminator="type")
    status: Literal["in_progress", "completed"] | None = None
    caller: _Caller | None = None
    created_by: str | None = None
    id: str | None = None


class _ApplyPatchCallOutput(StrictModel):
    type: Literal["apply_patch_call_output"]
    call_id: str = Field(min_length=1, max_length=64)
    status: Literal["completed", "failed"]
    output: str | None = None
    caller: _Caller | None = None
    created_by: str | None = None
    id: str | None = None


class _ToolSearchCall(StrictModel):
    type: Literal["tool_search_call"]
    arguments: dict[str, Any]
    call_id: str | None = Field(None, min_length=1, max_length=64)
    execution: Literal["server", "client"] = "client"
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    id: str | None = None
    created_by: str | None = None


class _AdditionalTools(StrictModel):
    type: Literal["additional_tools"]
    role: Literal["developer"]
    tools: list[dict[str, Any]]
    id: str | None = None


class _ToolSearchOutput(StrictModel):
    type: Literal["tool_search_output"]
    tools: list[dict[str, Any]]
    call_id: str | None = Field(None, min_length=1, max_length=64)
    execution: Literal["server", "client"] = "client"
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    id: str | None = None
    created_by: str | None = None


class _FileSearchCall(StrictModel):
    type: Literal["file_search_call"]
    queries: list[str]
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"] | None = None
    results: list[_FileSearchResult] | None = None
    id: str | None = None


class _McpApprovalRequest(StrictModel):
    type: Literal["mcp_approval_request"]
    id: str = Field(min_length=1, max_length=128)
    server_label: str
    name: str
    arguments: str


class _McpApprovalResponse(StrictModel):
    type: Literal["mcp_approval_response"]
    approval_request_id: str = Field(min_length=1, max_length=128)
    approve: bool
    id: str | None = None
    reason: str | None = None


class _TextPart(StrictModel):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class _ImagePart(StrictModel):
    type: Literal["input_image"]
    detail: Literal["low", "high", "auto", "original"] = "auto"
    image_url: str | None = None
    file_id: str | None = None


class _FilePart(StrictModel):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: Literal["low", "high", "auto"] | None = None


class _RefusalPart(StrictModel):
    type: Literal["refusal"]
    refusal: str = Field()


def parse_input(value: str | list[Any]) -> list[Item]:
    if isinstance(value, str):
        return [user_message(value)]
    if not value:
        raise errors.InvalidRequest(
            "Invalid 'input': empty array. Expected at least one item.", param="input", code="empty_array"
        )
    return parse_items(value, "input")


def parse_items(value: list[Any], param: str) -> list[Item]:
    """Input items under `param` (a create's `input`, a conversation's `items`), each checked."""
    return [_parse_item(raw, f"{param}[{i}]") for i, raw in enumerate(value)]


def user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}], "status": "completed"}


def _parse_item(raw: Any, param: str) -> Item:
    if not isinstance(raw, dict):
        raise errors.InvalidRequest(f"Invalid '{param}': expected an object.", param=param, code="invalid_type")
    if raw.get("type") in (None, "item_reference") and set(raw) - {"type"} == {"id"}:
        return _item_reference(raw, param)
    item_type = discriminator(raw, param, default="message")
    if item_type in UNSUPPORTED_ITEM_TYPES:
        raise errors.UnsupportedParameter(f"{param}.type", f"an input item of type '{item_type}'")
    parse = _ITEM_PARSERS.get(item_type) if item_type is not None else None
    if parse is None:
        raise errors.InvalidRequest(
            f"Invalid '{param}.type': unknown item type '{item_type}'.", param=f"{param}.type", code="invalid_value"
        )
    return parse(raw, param)


def _message(raw: dict[str, Any], param: str) -> Item:
    message = validate(_Message, raw, prefix=param)
    parts = (
        message.content
        if isinstance(message.content, list)
        else [{"type": "output_text" if message.role == "assistant" else "input_text", "text": message.content}]
    )
    content = [_parse_part(part, message.role, f"{param}.content[{j}]") for j, part in enumerate(parts)]
    item: Item = {"type": "message", "role": message.role, "content": content, "status": "completed"}
    if message.phase is not None:
        item["phase"] = message.phase
    return item


def _function_call(raw: dict[str, Any], param: str) -> Item:
    call = validate(_FunctionCall, raw, prefix=param)
    item: Item = {
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }
    if call.namespace is not None:
        item["namespace"] = call.namespace
    return item


def _custom_tool_call(raw: dict[str, Any], param: str) -> Item:
    call = validate(_CustomToolCall, raw, prefix=param)
    item: Item = {"type": "custom_tool_call", "call_id": call.call_id, "name": call.name, "input": call.input}
    if call.namespace is not None:
        item["namespace"] = call.namespace
    return item


def _tool_output(raw: dict[str, Any], param: str) -> Item:
    result = validate(_ToolOutput, raw, prefix=param)
    output = result.output
    if not isinstance(output, str):  # content parts: text and images
        output = [_parse_part(part, "user", f"{param}.output[{j}]") for j, part in enumerate(output)]
    item: Item = {"type": result.type, "call_id": result.call_id, "output": output}
    if result.type == "function_call_output":
        item["status"] = "completed"
    return item


def _reasoning(raw: dict[str, Any], param: str) -> Item:
    # Kept in the context; it reaches the model as the next assistant message's reasoning_content.
    reasoning = validate(_Reasoning, raw, prefix=param)
    item: Item = {"type": "reasoning", "summary": reasoning.summary, "content": reasoning.content or []}
    if reasoning.encrypted_content is not None:  # opened (and dropped) by the service before storing
        item["encrypted_content"] = reasoning.encrypted_content
    return item


def _compaction(raw: dict[str, Any], param: str) -> Item:
    # A summary of what came before it, sealed by this server (checked by the service, opened for the model).
    return {"type": "compaction", "encrypted_content": validate(_Compaction, raw, prefix=param).encrypted_content}


def _mcp_list_tools(raw: dict[str, Any], param: str) -> Item:
    listed = validate(_McpListTools, raw, prefix=param)
    return listed.model_dump(exclude={"id"}) | {"tools": [tool.model_dump() for tool in listed.tools]}


def _mcp_call(raw: dict[str, Any], param: str) -> Item:
    call = validate(_McpCall, raw, prefix=param)
    return call.model_dump(exclude={"id"}) | {"status": call.status or "completed"}


def _file_search_call(raw: dict[str, Any], param: str) -> Item:
    # A search made earlier (a store=false client replays it): it is not made again; the model
    # reads its queries and the results it carries.
    call = validate(_FileSearchCall, raw, prefix=param)
    results = None if call.results is None else [r.model_dump(exclude_none=True) for r in call.results]
    return {
        "type": "file_search_call",
        "status": call.status or "completed",
        "queries": call.queries,
        "results": results,
    }


def _item_reference(raw: dict[str, Any], param: str) -> Item:
    # A stored item of the caller's, by its id (`type` may be left out): the service puts the item
    # in its place before anything else reads the input (app/service/references.py).
    reference = validate(_ItemReference, raw, prefix=param)
    return {"type": "item_reference", "id": reference.id}


def _web_search_call(raw: dict[str, Any], param: str) -> Item:
    # A search made earlier (a client replays what it was given): not made again; the model reads
    # its query, and the results it carries where it kept them (include web_search_call.results).
    call = validate(_WebSearchCall, raw, prefix=param)
    item: Item = {
        "type": "web_search_call",
        "status": call.status or "completed",
        "action": call.action.model_dump(exclude_none=True),
    }
    if call.results is not None:
        item["results"] = [result.model_dump() for result in call.results]
    return item


def _client_tool_item(model: type[StrictModel]) -> Callable[[dict[str, Any], str], Item]:
    """A typed client tool's call or output, as sent (its id and `created_by`, ours to give, dropped)."""

    def parse(raw: dict[str, Any], param: str) -> Item:
        item = validate(model, raw, prefix=param).model_dump(exclude_none=True, exclude={"id", "created_by"})
        if "status" not in item and item["type"] != "apply_patch_call_output":
            item["status"] = "completed"
        return item

    return parse


def _local_shell_call_output(raw: dict[str, Any], param: str) -> Item:
    result = validate(_LocalShellCallOutput, raw, prefix=param)
    call_id = result.call_id or result.id
    if call_id is None:
        raise errors.InvalidRequest(
            f"Missing required parameter: '{param}.call_id'.",
            param=f"{param}.call_id",
            code="missing_required_parameter",
        )
    return {"type": "local_shell_call_output", "call_id": call_id, "output": result.output, "status": "completed"}


def _tool_search_call(raw: dict[str, Any], param: str) -> Item:
    call = validate(_ToolSearchCall, raw, prefix=param)
    return call.model_dump(exclude={"id", "created_by"}) | {"status": call.status or "completed"}


def _tool_search_output(raw: dict[str, Any], param: str) -> Item:
    # The tools a search loaded (the client's, in client execution), offered to the model from the
    # next turn on.
    output = validate(_ToolSearchOutput, raw, prefix=param)
    return output.model_dump(exclude={"id", "created_by", "tools"}) | {
        "tools": _loaded(output.tools, param),
        "status": output.status or "completed",
    }


def _additional_tools(raw: dict[str, Any], param: str) -> Item:
    # Tools the client makes available from here on, as a tool search's output does.
    given = validate(_AdditionalTools, raw, prefix=param)
    return {"type": "additional_tools", "role": "developer", "tools": _loaded(given.tools, param)}


def _loaded(tools: list[dict[str, Any]], param: str) -> list[Tool]:
    """Tools given to load: each checked as a request's function, custom or namespace tool is."""
    for index, tool in enumerate(tools):
        if tool.get("type") not in ("function", "custom", "namespace"):
            where = f"{param}.tools[{index}].type"
            raise errors.InvalidRequest(
                f"Invalid '{where}': a tool search loads function, custom and namespace tools.",
                param=where,
                code="invalid_value",
            )
    try:
        parsed, _ = parse_tools(tools, loaded=True)
    except errors.InvalidRequest as wrong:  # (named as the item's tools)
        where = f"{param}.{wrong.param}" if wrong.param else param
        raise errors.InvalidRequest(
            wrong.message.replace(f"'{wrong.param}", f"'{where}", 1), param=where, code=wrong.code
        ) from None
    return parsed


def _mcp_approval_request(raw: dict[str, Any], param: str) -> Item:
    return validate(_McpApprovalRequest, raw, prefix=param).model_dump()  # (its id is named by its answer)


def _mcp_approval_response(raw: dict[str, Any], param: str) -> Item:
    return validate(_McpApprovalResponse, raw, prefix=param).model_dump(exclude={"id"})


_ITEM_PARSERS: dict[str, Callable[[dict[str, Any], str], Item]] = {
    "message": _message,
    "function_call": _function_call,
    "function_call_output": _tool_output,
    "custom_tool_call": _custom_tool_call,
    "custom_tool_call_output": _tool_output,
    "reasoning": _reasoning,
    "compaction": _compaction,
    "mcp_list_tools": _mcp_list_tools,
    "mcp_call": _mcp_call,
    "mcp_approval_request": _mcp_approval_request,
    "mcp_approval_response": _mcp_approval_response,
    "file_search_call": _file_search_call,
    "web_search_call": _web_search_call,
    "tool_search_call": _tool_search_call,
    "tool_search_output": _tool_search_output,
    "additional_tools": _additional_tools,
    "shell_call": _client_tool_item(_ShellCall),
    "shell_call_output": _client_tool_item(_ShellCallOutput),
    "local_shell_call": _client_tool_item(_LocalShellCall),
    "local_shell_call_output": _local_shell_call_output,
    "apply_patch_call": _client_tool_item(_ApplyPatchCall),
    "apply_patch_call_output": _client_tool_item(_ApplyPatchCallOutput),
}


def _parse_part(raw: Any, role: str, param: str) -> Item:
    if not isinstance(raw, dict):
        raise errors.InvalidRequest(f"Invalid '{param}': expected an object.", param=param, code="invalid_type")
    part_type = discriminator(raw, param)
    if part_type in UNSUPPORTED_CONTENT_TYPES:
        raise errors.UnsupportedParameter(f"{param}.type", f"content of type '{part_type}'")
    if part_type == "refusal" and role == "assistant":
        return {"type": "refusal", "refusal": validate(_RefusalPart, raw, prefix=param).refusal}
    if part_type == "input_image" and role != "assistant":
        return _image(raw, param)
    if part_type == "input_file" and role != "assistant":
        return _file(raw, param)
    expected = "output_text" if role == "assistant" else "input_text"
    if part_type != expected:
        raise errors.InvalidRequest(
            f"Invalid '{param}.type': '{part_type}' is not valid in a {role} message; expected '{expected}'.",
            param=f"{param}.type",
            code="invalid_value",
        )
    text = validate(_TextPart, raw, prefix=param).text
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "input_text", "text": text}


def _image(raw: dict[str, Any], param: str) -> Item:
    image = validate(_ImagePart, raw, prefix=param)
    if image.file_id is not None:
        raise errors.UnsupportedParameter(f"{param}.file_id", "an image by file_id (there is no Files API here)")
    if image.image_url is None:
        raise errors.InvalidRequest(
            f"Missing required parameter: '{param}.image_url'.",
            param=f"{param}.image_url",
            code="missing_required_parameter",
        )
    if not image.image_url.startswith(("https://", "http://", "data:image/")):
        raise errors.InvalidRequest(
            f"Invalid '{param}.image_url': expected an http(s) URL or a data:image/… URL.",
            param=f"{param}.image_url",
            code="invalid_value",
        )
    return {"type": "input_image", "detail": image.detail, "image_url": image.image_url}


def _file(raw: dict[str, Any], param: str) -> Item:
    """A file as the client sent it (that is what is stored and listed); the service reads it
    into the text the model reads (app/service/file_inputs.py)."""
    part = validate(_FilePart, raw, prefix=param)
    sources = [name for name in ("file_id", "file_data", "file_url") if getattr(part, name) is not None]
    if len(sources) != 1:
        raise errors.InvalidRequest(
            f"Invalid '{param}': expected exactly one of 'file_id', 'file_data' or 'file_url'"
            + (f", got {' and '.join(sources)}." if sources else "."),
            param=param,
            code="invalid_value" if sources else "missing_required_parameter",
        )
    if part.file_data is not None and not part.filename:
        raise errors.InvalidRequest(
            f"Missing required parameter: '{param}.filename' (a file sent as 'file_data' needs its name).",
            param=f"{param}.filename",
            code="missing_required_parameter",
        )
    if part.file_url is not None and not part.file_url.startswith(("https://", "http://")):
        raise errors.InvalidRequest(
            f"Invalid '{param}.file_url': expected an http(s) URL.", param=f"{param}.file_url", code="invalid_value"
        )
    return part.model_dump(exclude_none=True)


def image_count(items: list[Item]) -> int:
    """Images in these items: in messages and in function call outputs."""
    count = 0
    for item in items:
        parts = item.get("content") if item["type"] == "message" else item.get("output")
        if isinstance(parts, list):
            count += sum(part.get("type") == "input_image" for part in parts)
    return count


def item_text(item: Item) -> str:
    """The plain text of a message item (its text, refusal and file parts, concatenated)."""
    return "".join(part_text(part) for part in item.get("content", []))

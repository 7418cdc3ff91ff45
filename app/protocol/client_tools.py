"""The tools a client runs that are not functions: `shell`, `local_shell` and `apply_patch` (the
Agents SDKs' ShellTool, LocalShellTool, ApplyPatchTool). An open model is offered each as a
function whose parameters mirror the typed call; its call comes back as the typed item
(`shell_call`, `local_shell_call`, one `apply_patch_call` per file operation of its patch), and
the client's typed outputs reach the model as the tool's answer. Pure.

A call whose arguments make no typed item (a shell call without commands, a patch that is not
V4A) never reaches the client: `CallRefused` says why, and the model is told and asked again
(workers/jobs/generate.py).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from app import errors
from app.protocol import v4a_patch
from app.protocol.shapes import Item, Tool
from app.protocol.validation import StrictModel, validate

TOOL_TYPES = ("shell", "local_shell", "apply_patch")
CALL_TYPES = ("shell_call", "local_shell_call", "apply_patch_call")
OUTPUT_TYPES = ("shell_call_output", "local_shell_call_output", "apply_patch_call_output")
MAX_OUTPUT_CHARS = 64 * 1024  # of one command's output, as the model reads it, when the call sets no limit

# Each strict (optional fields nullable), so that engines holding strict functions to their schema
# (vLLM's named and required calls) always give arguments that make a typed call.
FUNCTIONS: dict[str, dict[str, Any]] = {
    "shell": {
        "name": "shell",
        "description": (
            "Run shell commands in the user's workspace, in order, and read what each printed and its exit code."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "commands": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "timeout_ms": {"type": ["integer", "null"], "description": "How long each command may run."},
                "max_output_length": {
                    "type": ["integer", "null"],
                    "description": "The most characters of output to read.",
                },
            },
            "required": ["commands", "timeout_ms", "max_output_length"],
            "additionalProperties": False,
        },
        "strict": True,
    },
    "local_shell": {
        "name": "local_shell",
        "description": "Run one command (its argv) in the user's workspace and read what it printed.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "workdir": {"type": ["string", "null"]},
                "timeout_ms": {"type": ["integer", "null"]},
            },
            "required": ["command", "workdir", "timeout_ms"],
            "additionalProperties": False,
        },
        "strict": True,
    },
    "apply_patch": {
        "name": "apply_patch",
        "description": (
            "Edit files in the user's workspace with a patch in the V4A format: '*** Begin Patch', then for "
            "each file '*** Add File: PATH' with every line prefixed '+', '*** Update File: PATH' with hunks "
            "('@@ ANCHOR', then lines prefixed ' ' to keep, '-' to remove, '+' to add), or "
            "'*** Delete File: PATH', then '*** End Patch'. Paths are relative to the workspace."
        ),
        "parameters": {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The whole patch."}},
            "required": ["input"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


class CallRefused(ValueError):
    """Why a call's arguments make no typed item, worded for the model."""


class _LocalEnvironment(StrictModel):
    type: Literal["local"]
    skills: list[Any] | None = None


class _ShellTool(StrictModel):
    type: Literal["shell"]
    environment: dict[str, Any] | None = None
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None


class _OtherTool(StrictModel):
    type: Literal["local_shell", "apply_patch"]
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None


def parse_tool(entry: dict[str, Any], param: str) -> Tool:
    """The tool as a Response echoes it; a shell run in one of OpenAI's containers is a 400: the
    client runs these tools, and only a local environment is the client's."""
    if entry.get("type") != "shell":
        return validate(_OtherTool, entry, prefix=param).model_dump(exclude_none=True)
    tool = validate(_ShellTool, entry, prefix=param)
    if tool.environment is not None:
        kind = tool.environment.get("type")
        if kind != "local":
            raise errors.UnsupportedParameter(f"{param}.environment", f"a shell environment of type '{kind}'")
        validate(_LocalEnvironment, tool.environment, prefix=f"{param}.environment")
    return tool.model_dump(exclude_none=True)


def shell_call(arguments: str) -> Item:
    """A `shell_call`'s fields from the model's arguments (its id and call_id aside)."""
    parsed = _object(arguments)
    commands = parsed.get("commands", parsed.get("command"))
    if isinstance(commands, str):
        commands = [commands]
    if not isinstance(commands, list) or not commands or not all(isinstance(c, str) and c.strip() for c in commands):
        raise CallRefused("The shell call needs 'commands': a list of one or more commands.")
    action: Item = {"commands": commands}
    for name in ("timeout_ms", "max_output_length"):
        value = parsed.get(name)
        if isinstance(value, int) and value > 0:
            action[name] = value
    return {"type": "shell_call", "action": action, "environment": {"type": "local"}}


def local_shell_call(arguments: str) -> Item:
    parsed = _object(arguments)
    command = parsed.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise CallRefused("The local_shell call needs 'command': the command's argv, a list of strings.")
    action: Item = {"type": "exec", "command": command, "env": {}}
    if isinstance(parsed.get("timeout_ms"), int) and parsed["timeout_ms"] > 0:
        action["timeout_ms"] = parsed["timeout_ms"]
    if isinstance(parsed.get("workdir"), str) and parsed["workdir"]:
        action["working_directory"] = parsed["workdir"]
    return {"type": "local_shell_call", "action": action}


def patch_operations(arguments: str) -> list[Item]:
    """The file operations of the model's patch, one `apply_patch_call` each."""
    patch = _object(arguments).get("input")
    if not isinstance(patch, str):
        raise CallRefused("The apply_patch call needs 'input': the whole patch, as a string.")
    try:
        return v4a_patch.operations(patch)
    except v4a_patch.PatchError as wrong:
        raise CallRefused(f"The patch was not applied: {wrong}") from None


def arguments_of(call: Item) -> str:
    """A typed call as the arguments of the function the model called (a later turn reads them)."""
    kind = call["type"]
    if kind == "shell_call":
        return json.dumps(call["action"], ensure_ascii=False)
    if kind == "local_shell_call":
        action = call["action"]
        shown = {"command": action["command"]}
        if action.get("working_directory"):
            shown["workdir"] = action["working_directory"]
        return json.dumps(shown, ensure_ascii=False)
    return json.dumps({"input": v4a_patch.envelope(call["operation"])}, ensure_ascii=False)


def output_text(output: Item, call: Item | None) -> str:
    """A client's typed output as the model reads it (`call`: the call it answers, if known)."""
    kind = output["type"]
    if kind == "apply_patch_call_output":
        said = f": {output['output']}" if output.get("output") else ""
        return f"{'Applied' if output['status'] == 'completed' else 'Failed'}{said}"
    if kind == "local_shell_call_output":
        return str(output["output"])
    commands = (call or {}).get("action", {}).get("commands") or []
    limit = output.get("max_output_length") or MAX_OUTPUT_CHARS
    parts = []
    for n, result in enumerate(output["output"]):
        outcome = result.get("outcome") or {}
        ended = f"exit {outcome.get('exit_code')}" if outcome.get("type") == "exit" else "timed out"
        command = commands[n] if n < len(commands) else f"command {n + 1}"
        printed = (result.get("stdout") or "") + (result.get("stderr") or "")
        parts.append(f"$ {command}\n{printed[:limit]}{'…' if len(printed) > limit else ''}\n({ended})")
    return "\n".join(parts) or "(no output)"


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as the JSON object a typed item carries (a client's tool search's)."""
    return _object(arguments)


def _object(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        raise CallRefused("The call's arguments are not JSON.") from None
    if not isinstance(parsed, dict):
        raise CallRefused("The call's arguments must be a JSON object.")
    return parsed

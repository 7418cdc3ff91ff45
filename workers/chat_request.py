"""Responses request + context → a Chat Completions request. Pure: tables of cases test it."""

from __future__ import annotations

from typing import Any

from app.catalog import ModelEntry
from app.protocol.input_items import Item, item_text
from app.protocol.response_object import ResponseRecord

# Chat servers treat top_p 0 as invalid or as "off"; OpenAI means "most likely token only".
TOP_P_ZERO = 1e-9


def chat_request(record: ResponseRecord, context: list[Item], model: ModelEntry) -> dict[str, Any]:
    requested = record.settings.get("requested", {})
    body: dict[str, Any] = {
        "model": model.served_name,
        "messages": chat_messages(record.instructions, context),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": min(requested.get("max_output_tokens") or model.max_output_tokens, model.max_output_tokens),
    }
    # Only what the client set: the runtime's own defaults (the model's generation config) win otherwise.
    if requested.get("temperature") is not None:
        body["temperature"] = requested["temperature"]
    if requested.get("top_p") is not None:
        body["top_p"] = requested["top_p"] or TOP_P_ZERO
    response_format = _response_format(record.settings["text"]["format"], model)
    if response_format is not None:
        body["response_format"] = response_format
    return body | _tools(record.settings)


def chat_messages(instructions: str | None, context: list[Item]) -> list[dict[str, Any]]:
    """The system prompt is `instructions` then every system/developer message, in order; a
    function call joins the assistant message before it (one assistant turn may say something
    and call tools); earlier reasoning is left out, as chat templates leave it out."""
    system_parts = [instructions] if instructions else []
    messages: list[dict[str, Any]] = []
    for item in context:
        kind = item["type"]
        if kind == "message" and item["role"] in ("system", "developer"):
            system_parts.append(item_text(item))
        elif kind == "message":
            messages.append({"role": item["role"], "content": item_text(item)})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                # Empty, not null: llama.cpp refuses null, and chat templates concatenate content.
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item["output"]
            content = output if isinstance(output, str) else "".join(p.get("text", "") for p in output)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
    if system_parts:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system_parts)})
    return messages


def _tools(settings: dict[str, Any]) -> dict[str, Any]:
    tools = settings.get("tools") or []
    if not tools:
        return {}
    functions = [
        {
            "type": "function",
            "function": {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None},
        }
        for tool in tools
    ]
    choice = settings["tool_choice"]
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice["name"]}}
    body = {"tools": functions, "tool_choice": choice}
    if not settings["parallel_tool_calls"]:  # servers default to allowing them, as OpenAI does
        body["parallel_tool_calls"] = False
    return body


def _response_format(text_format: dict[str, Any], model: ModelEntry) -> dict[str, Any] | None:
    if text_format["type"] == "json_object":
        return {"type": "json_object"}
    if text_format["type"] != "json_schema":
        return None
    if model.structured_output == "json_object_schema":
        return {"type": "json_object", "schema": text_format["schema"]}
    json_schema = {"name": text_format["name"], "schema": text_format["schema"], "strict": text_format["strict"]}
    if text_format.get("description"):
        json_schema["description"] = text_format["description"]
    return {"type": "json_schema", "json_schema": json_schema}

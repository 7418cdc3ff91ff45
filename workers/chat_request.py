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
    return body | _tools(record.settings) | _reasoning(record.settings["reasoning"]["effort"], model)


def chat_messages(instructions: str | None, context: list[Item]) -> list[dict[str, Any]]:
    """The system prompt is `instructions` then every system/developer message, in order; a
    function call joins the assistant message before it (one assistant turn may say something
    and call tools); images in function call outputs reach the model as a user message after
    the tool results (tool messages carry text only); earlier reasoning is left out, as chat
    templates leave it out."""
    messages = _Messages()
    for item in context:
        messages.add(item)
    return messages.done(instructions)


class _Messages:
    def __init__(self) -> None:
        self.system_parts: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.tool_images: list[dict[str, Any]] = []

    def add(self, item: Item) -> None:
        kind = item["type"]
        if kind != "function_call_output":
            self._flush_tool_images()
        if kind == "message" and item["role"] in ("system", "developer"):
            self.system_parts.append(item_text(item))
        elif kind == "message":
            self.messages.append({"role": item["role"], "content": _content(item["content"])})
        elif kind == "function_call":
            self._call(item)
        elif kind == "function_call_output":
            output = item["output"]
            parts = [{"type": "input_text", "text": output}] if isinstance(output, str) else output
            text = "".join(p.get("text", "") for p in parts)
            self.messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
            self.tool_images += [_image_part(p) for p in parts if p["type"] == "input_image"]

    def _call(self, item: Item) -> None:
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1].setdefault("tool_calls", []).append(call)
        else:
            # Empty, not null: llama.cpp refuses null, and chat templates concatenate content.
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})

    def _flush_tool_images(self) -> None:
        if self.tool_images:
            self.messages.append({"role": "user", "content": self.tool_images})
            self.tool_images = []

    def done(self, instructions: str | None) -> list[dict[str, Any]]:
        self._flush_tool_images()
        system = [instructions] if instructions else []
        system += self.system_parts
        if system:
            return [{"role": "system", "content": "\n\n".join(system)}, *self.messages]
        return self.messages


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text as a string; with images, the chat API's list of text and image_url parts."""
    if not any(part["type"] == "input_image" for part in parts):
        return "".join(part.get("text") or part.get("refusal") or "" for part in parts)
    return [_image_part(p) if p["type"] == "input_image" else {"type": "text", "text": p["text"]} for p in parts]


def _image_part(part: dict[str, Any]) -> dict[str, Any]:
    image_url = {"url": part["image_url"]}
    if part["detail"] in ("low", "high"):
        image_url["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image_url}


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


def _reasoning(effort: str | None, model: ModelEntry) -> dict[str, Any]:
    """`low` and above turn reasoning on, `none` and `minimal` off; unset leaves the model's default."""
    if effort is None or model.reasoning is None:
        return {}
    if model.reasoning.control == "reasoning_effort":
        return {"reasoning_effort": effort}
    return {"chat_template_kwargs": {model.reasoning.template_flag: effort not in ("none", "minimal")}}

"""Responses request + context → a Chat Completions request. Pure: tables of cases test it."""

from __future__ import annotations

from typing import Any

from app.catalog import ModelEntry
from app.protocol.input_items import Item, item_text
from app.protocol.response_object import ResponseRecord

# Chat servers treat top_p 0 as invalid or as "off"; OpenAI means "most likely token only".
TOP_P_ZERO = 1e-9


def chat_request(record: ResponseRecord, context: list[Item], model: ModelEntry) -> dict[str, Any]:
    system_parts = [record.instructions] if record.instructions else []
    messages: list[dict[str, Any]] = []
    for item in context:
        if item["type"] != "message":
            continue
        if item["role"] in ("system", "developer"):
            system_parts.append(item_text(item))
        else:
            messages.append({"role": item["role"], "content": item_text(item)})
    if system_parts:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system_parts)})

    requested = record.settings.get("requested", {})
    body: dict[str, Any] = {
        "model": model.served_name,
        "messages": messages,
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

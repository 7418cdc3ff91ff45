"""Responses request + context → a Chat Completions request. Pure: tables of cases test it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.catalog import ModelEntry
from app.protocol import client_tools, tool_search, web_search
from app.protocol.file_search import FUNCTION_NAME
from app.protocol.hosted_calls import SEARCH_CALL_TYPES
from app.protocol.input_files import part_images, part_text
from app.protocol.input_items import CLIENT_CALL_TYPES, CLIENT_OUTPUT_TYPES, item_text
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Item, Tool
from app.protocol.tools import served_kind
from app.protocol.web_search import FUNCTION_NAME as WEB_SEARCH_FUNCTION
from workers.translation.tools import RuntimeTools, custom_arguments, forced_grammar_tool
from workers.translation.translate import RefusedCall

# Chat servers treat top_p 0 as invalid or as "off"; OpenAI means "most likely token only".
TOP_P_ZERO = 1e-9


def chat_request(
    record: ResponseRecord,
    context: list[Item],
    model: ModelEntry,
    tools: RuntimeTools | None = None,
    earlier_answers: int = 0,
    search_results: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`tools`: the response's tools at the runtime, when the caller has them already.
    `earlier_answers`: the model's answers in this response already (a tool loop's), after which
    the choice of tool is its own, or a forced call would be made again and again.
    `search_results`: what the model reads of this response's file searches, by item id (their
    items keep the results only under `include`)."""
    requested = record.settings.get("requested", {})
    tools = tools or RuntimeTools.for_settings(record.settings)
    choice = "auto" if earlier_answers else record.settings["tool_choice"]
    if model.loaded_tools == "in_context" and choice == "auto":  # (a forced call is held to the tools listed)
        tools = tools.loaded_in_context()
    body: dict[str, Any] = {
        "model": model.served_name,
        "messages": chat_messages(record.instructions, context, tools, search_results),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": min(requested.get("max_output_tokens") or model.max_output_tokens, model.max_output_tokens),
    }
    # What the client set, over the catalog's defaults for the model; the runtime's own defaults
    # (the model's generation config) for the rest.
    if model.sampling is not None:
        body.update(model.sampling.body())
    if requested.get("temperature") is not None:
        body["temperature"] = requested["temperature"]
    if requested.get("top_p") is not None:
        body["top_p"] = requested["top_p"] or TOP_P_ZERO
    body.update(requested.get("sampling") or {})
    if requested.get("logprobs"):
        body["logprobs"] = True
        if record.settings["top_logprobs"]:
            body["top_logprobs"] = record.settings["top_logprobs"]
    response_format = _response_format(record.settings["text"]["format"], model)
    if response_format is not None:
        body["response_format"] = response_format
    grammar_tool = forced_grammar_tool(record.settings)
    offered = _tools(record.settings, tools, choice) if grammar_tool is None else _grammar(grammar_tool, model)
    return body | offered | _reasoning(record.settings["reasoning"]["effort"], model)


def continuing(body: dict[str, Any], text: str, model: ModelEntry) -> dict[str, Any]:
    """The request that continues an answer cut short after `text`: the same request with the
    answer so far as the last assistant message, which the server goes on from (vLLM:
    `continue_final_message`, no new generation prompt), and room for what is left of the answer
    (its tokens estimated as a quarter of its bytes, as OpenAI estimates them)."""
    if not text:
        return body  # nothing was written: the same request, from the start
    already = max(1, len(text.encode()) // 4)
    continued = {
        **body,
        "messages": [*body["messages"], {"role": "assistant", "content": text}],
        "max_tokens": max(1, body["max_tokens"] - already),
    }
    if model.continuation == "continue_final_message":
        continued |= {"continue_final_message": True, "add_generation_prompt": False}
    return continued


def _grammar(tool: Tool, model: ModelEntry) -> dict[str, Any]:
    """The answer held to the tool's grammar, as vLLM takes one (no tools offered: the answer is the input)."""
    form = tool["format"]
    kind = "grammar" if form["syntax"] == "lark" else "regex"
    if model.grammar == "guided":  # vLLM before 0.12
        return {f"guided_{kind}": form["definition"]}
    return {"structured_outputs": {kind: form["definition"]}}


def chat_messages(
    instructions: str | None,
    context: list[Item],
    tools: RuntimeTools | None = None,
    search_results: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The system prompt is `instructions` then every system/developer message, in order; a
    function call joins the assistant message before it (one assistant turn may say something
    and call tools); images in function call outputs reach the model as a user message after
    the tool results (tool messages carry text only); a reasoning item reaches the model as the
    `reasoning_content` of the assistant message after it, which the chat template keeps (the
    turn's own tool loop) or drops (earlier turns), as the model was trained."""
    messages = _Messages(tools or RuntimeTools.of([]), search_results or {})
    messages.approval_requests = {item["id"]: item for item in context if item["type"] == "mcp_approval_request"}
    for item in context:
        messages.add(item)
    return messages.done(instructions)


class _Messages:
    def __init__(self, tools: RuntimeTools, search_results: Mapping[str, str]) -> None:
        self.tools = tools
        self.search_results = search_results
        self.system_parts: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.tool_images: list[dict[str, Any]] = []
        self.reasoning: list[str] = []  # for the next assistant message
        self.approval_requests: dict[str, Item] = {}  # by id: what an approval response answers
        self.client_calls: dict[str, Item] = {}  # typed calls of the client's tools, by call_id

    def add(self, item: Item) -> None:
        kind = item["type"]
        if self.tool_images and kind not in CLIENT_OUTPUT_TYPES:
            self._flush_tool_images()
        if kind == "message":
            role = item["role"]
            if role in ("system", "developer"):
                self.system_parts.append(item_text(item))
            else:
                self._message(role, _content(item["content"]))
        elif kind == "reasoning":
            self.reasoning.append(reasoning_text(item))
        elif kind in CLIENT_CALL_TYPES:
            self._client_call(item)
        elif kind in CLIENT_OUTPUT_TYPES:
            self._client_output(item)
        elif kind == "mcp_call":  # made by the server: the model sees its call and what it answered
            name = self.tools.runtime_name("mcp", item["name"], item["server_label"])
            self._call(item["id"], name, item["arguments"])
            self._result(item["id"], _mcp_result(item))
        elif kind in SEARCH_CALL_TYPES:  # made by the server: what it searched for, and what it found
            self._search(item)
        elif kind == "mcp_approval_response" and not item["approve"]:
            # An approved call shows as its mcp_call; an approval still awaited, not at all.
            request = self.approval_requests.get(item["approval_request_id"])
            if request is not None:
                name = self.tools.runtime_name("mcp", request["name"], request["server_label"])
                self._call(request["id"], name, request["arguments"])
                reason = f": {item['reason']}" if item.get("reason") else "."
                self._result(request["id"], f"The user did not approve this call{reason}")

    def _client_output(self, item: Item) -> None:
        """What a client's tool answered: a function's or custom tool's output (its images after
        the tool results, as a user message), a typed tool's, a tool search's loaded tools."""
        kind = item["type"]
        if kind in client_tools.OUTPUT_TYPES:
            self._result(item["call_id"], client_tools.output_text(item, self.client_calls.get(item["call_id"])))
        elif kind == "tool_search_output":
            if item.get("call_id"):
                described = self.tools.described(item.get("tools") or [])
                self._result(item["call_id"], tool_search.output_text(item, described))
        else:
            output = item["output"]
            parts = [{"type": "input_text", "text": output}] if isinstance(output, str) else output
            text = "".join(part_text(p) for p in parts)
            self.messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
            self.tool_images += [_image_part(p) for p in parts if p["type"] == "input_image"]
            self.tool_images += [{"type": "image_url", "image_url": {"url": u}} for p in parts for u in _pages(p)]

    def _client_call(self, item: Item) -> None:
        """A call of a client's tool: a function's, a custom tool's, or a typed one's (shell,
        local_shell, apply_patch: as the function the model called, one call per typed item)."""
        kind = item["type"]
        if kind == "function_call":
            name = self.tools.runtime_name("function", item["name"], item.get("namespace"))
            self._call(item["call_id"], name, item["arguments"])
        elif kind == "custom_tool_call":
            name = self.tools.runtime_name("custom", item["name"], item.get("namespace"))
            self._call(item["call_id"], name, custom_arguments(item["input"]))
        elif kind == "tool_search_call":
            name = self.tools.runtime_name("tool_search", tool_search.FUNCTION_NAME, None)
            if item.get("call_id"):
                self._call(item["call_id"], name, json.dumps(item.get("arguments") or {}, ensure_ascii=False))
        else:
            self.client_calls[item["call_id"]] = item
            tool = kind.removesuffix("_call")
            name = self.tools.runtime_name(tool, client_tools.FUNCTIONS[tool]["name"], None)
            self._call(item["call_id"], name, client_tools.arguments_of(item))

    def _search(self, item: Item) -> None:
        """A search the server made (or a client replays): the model's call, and what it read of
        the results (this response's own with their markers, an earlier turn's without)."""
        if item["type"] == "file_search_call":
            name = self.tools.runtime_name("file_search", FUNCTION_NAME, None)
            arguments: dict[str, Any] = {"queries": item.get("queries") or []}
            found = _search_result(item)
        else:
            function, arguments = web_search.call_of(item)
            name = self.tools.runtime_name("web_search", function, None)
            found = web_search.without_markers(item)
        self._call(item["id"], name, json.dumps(arguments, ensure_ascii=False))
        self._result(item["id"], self.search_results.get(item["id"]) or found)

    def _result(self, call_id: str, text: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _message(self, role: str, content: str | list[dict[str, Any]]) -> None:
        message: dict[str, Any] = {"role": role, "content": content}
        if self.reasoning:
            if role == "assistant":
                self._take_reasoning(message)
            else:
                self.reasoning = []  # reasoning followed by no answer of its own: nothing to attach it to
        self.messages.append(message)

    def _call(self, call_id: str, name: str, arguments: str) -> None:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        if self.messages and self.messages[-1]["role"] == "assistant" and not self.reasoning:
            self.messages[-1].setdefault("tool_calls", []).append(call)
        else:
            # Empty, not null: llama.cpp refuses null, and chat templates concatenate content.
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
            self._take_reasoning(message)
            self.messages.append(message)

    def _take_reasoning(self, message: dict[str, Any]) -> None:
        if self.reasoning:
            message["reasoning_content"] = "\n\n".join(self.reasoning)
            self.reasoning = []

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


def _mcp_result(call: Item) -> str:
    if call.get("error") is not None:
        return f"The tool call failed: {json.dumps(call['error'], ensure_ascii=False)}"
    return str(call.get("output") or "")


def _search_result(item: Item) -> str:
    """An earlier search's results, without markers (this answer cites only its own searches)."""
    results = item.get("results")
    if results is None:
        return "The results of this search were not kept; search again if you need them."
    if not results:
        return "The search found nothing in the files."
    return "\n".join(f'<result file="{r.get("filename", "")}">\n{r.get("text", "")}\n</result>' for r in results)


def reasoning_text(item: Item) -> str:
    """A reasoning item's text: its reasoning_text parts, else its summary."""
    parts = item.get("content") or item.get("summary") or []
    return "".join(part.get("text", "") for part in parts)


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text as a string (a file as its text); with images (a PDF's pages among them), the chat
    API's list of text and image_url parts."""
    if len(parts) == 1 and not part_images(parts[0]):  # most messages: one part of text
        return part_text(parts[0])
    if not any(part_images(part) for part in parts):
        return "".join(part_text(part) for part in parts)
    content: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "input_image":
            content.append(_image_part(part))
            continue
        content.append({"type": "text", "text": part_text(part)})
        content += [{"type": "image_url", "image_url": {"url": url}} for url in part_images(part)]
    return content


def _pages(part: dict[str, Any]) -> list[str]:
    """A file's page images (an image part's own image goes as itself, with its detail)."""
    return part_images(part) if part["type"] == "input_file" else []


def _image_part(part: dict[str, Any]) -> dict[str, Any]:
    image_url = {"url": part["image_url"]}
    if part["detail"] in ("low", "high"):
        image_url["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image_url}


def _tools(settings: dict[str, Any], tools: RuntimeTools, choice: Any) -> dict[str, Any]:
    if not tools.functions:
        return {}
    if isinstance(choice, dict) and served_kind(choice["type"]) is not None:
        kind = served_kind(choice["type"])
        choice = {"type": kind, "name": FUNCTION_NAME if kind == "file_search" else WEB_SEARCH_FUNCTION}
    if isinstance(choice, dict) and choice["type"] in client_tools.TOOL_TYPES:
        choice = {"type": choice["type"], "name": client_tools.FUNCTIONS[choice["type"]]["name"]}
    if isinstance(choice, dict) and choice["type"] == "mcp":  # a server's tool by name, or any of them
        named = choice.get("name")
        label = choice["server_label"]
        choice = "required" if named is None else {"type": "mcp", "name": named, "namespace": label}
    if isinstance(choice, dict):
        name = tools.runtime_name(choice["type"], choice["name"], choice.get("namespace"))
        choice = {"type": "function", "function": {"name": name}}
    body = {"tools": tools.functions, "tool_choice": choice}
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


def with_refusals(body: dict[str, Any], answer_text: str, refused: list[RefusedCall]) -> dict[str, Any]:
    """The request asked again after an answer whose calls of client tools made no typed item:
    the answer as it was, and each call told why (app/protocol/client_tools.py `CallRefused`)."""
    calls = [
        {"id": call.call_id, "type": "function", "function": {"name": call.runtime_name, "arguments": call.arguments}}
        for call in refused
    ]
    told = [{"role": "tool", "tool_call_id": call.call_id, "content": call.reason} for call in refused]
    return {
        **body,
        "messages": [*body["messages"], {"role": "assistant", "content": answer_text, "tool_calls": calls}, *told],
    }

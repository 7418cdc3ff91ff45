"""Items as the console shows them: a title, the text a reader wants (a message's words, a call's
arguments and what it answered), images as thumbnails, and the item's JSON for the rest. Every
string stays text: the templates escape it, and nothing here is markup. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_IMAGE_PREFIXES = ("data:image/png;", "data:image/jpeg;", "data:image/gif;", "data:image/webp;")


@dataclass(frozen=True, slots=True)
class ItemView:
    kind: str  # the item's type, or a message's role
    title: str
    texts: list[tuple[str, str]] = field(default_factory=list)  # (label, text)
    images: list[str] = field(default_factory=list)  # data: URLs only (the page loads nothing from elsewhere)
    raw: str = ""


def item_view(item: dict[str, Any]) -> ItemView:
    kind = str(item.get("type") or "message")
    raw = json.dumps(item, indent=2, ensure_ascii=False)
    if kind == "message":
        texts, images = _content(item.get("content"))
        return ItemView(str(item.get("role")), f"{item.get('role')} message", texts, images, raw)
    if kind == "reasoning":
        summary = "\n\n".join(str(part.get("text", "")) for part in item.get("summary") or [])
        return ItemView(kind, "reasoning", [("summary", summary)] if summary else [], raw=raw)
    if kind in ("function_call", "custom_tool_call", "mcp_call"):
        name = f"{item['server_label']}: {item.get('name')}" if kind == "mcp_call" else str(item.get("name"))
        texts = [("arguments", str(item.get("arguments") or item.get("input") or ""))]
        if item.get("output") is not None:
            texts.append(("output", str(item["output"])))
        if item.get("error") is not None:
            texts.append(("error", json.dumps(item["error"], ensure_ascii=False)))
        return ItemView(kind, f"{kind.replace('_', ' ')} {name}", texts, raw=raw)
    if kind.endswith("_output") and "output" in item:
        output = item["output"]
        if isinstance(output, list):
            texts, images = _content(output)
            return ItemView(kind, kind.replace("_", " "), texts, images, raw)
        return ItemView(
            kind,
            kind.replace("_", " "),
            [("output", json.dumps(output) if not isinstance(output, str) else output)],
            raw=raw,
        )
    if kind == "file_search_call":
        return ItemView(kind, "file search", [("queries", "\n".join(item.get("queries") or []))], raw=raw)
    return ItemView(kind, kind.replace("_", " "), raw=raw)


def _content(content: Any) -> tuple[list[tuple[str, str]], list[str]]:
    if isinstance(content, str):
        return [("text", content)], []
    texts: list[tuple[str, str]] = []
    images: list[str] = []
    for part in content or []:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            texts.append(("text", str(part.get("text", ""))))
        elif kind == "refusal":
            texts.append(("refusal", str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = str(part.get("image_url") or "")
            if url.startswith(_IMAGE_PREFIXES):
                images.append(url)
            else:
                texts.append(("image", url or f"file {part.get('file_id')}"))
        elif kind == "input_file":
            texts.append(("file", str(part.get("filename") or part.get("file_id") or "a file")))
    return texts, images

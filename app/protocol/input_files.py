"""`input_file` parts in a request's items: found with the parameter each sits at, given the text
the model reads of them, and shown to clients as they were sent.

The service reads each file (app/service/file_inputs.py) and keeps what the model reads of it
in the stored part under `MODEL_TEXT` (and a PDF's page images under `MODEL_IMAGES`), beside
the fields the client sent: the file is then read
once, when the request arrives, and every later turn of a chain or conversation sends the model
the same text. Clients never see that key (`as_listed`).
"""

from __future__ import annotations

from collections.abc import Iterator

from app.protocol.shapes import Item, content_parts

MODEL_TEXT = "_text"
MODEL_IMAGES = "_pages"  # a PDF's first pages, as image data URLs, for a model that sees images
_MODEL_KEYS = (MODEL_TEXT, MODEL_IMAGES)


def file_parts(items: list[Item], param: str = "input") -> Iterator[tuple[Item, str]]:
    """Every input_file part of these items (in messages and tool outputs), with its parameter."""
    return content_parts(items, "input_file", param)


def as_listed(item: Item) -> Item:
    """The item as its client sent it: its files without the text the model reads of them."""
    field = "content" if item.get("type") == "message" else "output"
    parts = item.get(field)
    if not isinstance(parts, list) or not any(part.get("type") == "input_file" for part in parts):
        return item
    shown = [
        {k: v for k, v in part.items() if k not in _MODEL_KEYS} if part.get("type") == "input_file" else part
        for part in parts
    ]
    return {**item, field: shown}


def part_images(part: Item) -> list[str]:
    """The images the model sees of a content part: an image's URL, or a file's page images."""
    if part.get("type") == "input_image":
        return [part["image_url"]]
    return list(part.get(MODEL_IMAGES) or ())


def part_text(part: Item) -> str:
    """What the model reads of a content part: its text, its refusal, or its file's text."""
    return str(part.get("text") or part.get("refusal") or part.get(MODEL_TEXT) or "")


def framed(filename: str, text: str, pages: int | None) -> str:
    """A file's text as the model reads it: named, its ends marked, set apart from the text
    around it in its message."""
    name = filename.replace('"', "'")
    counted = f' pages="{pages}"' if pages is not None else ""
    return f'\n\n<file name="{name}"{counted}>\n{text}\n</file>\n\n'

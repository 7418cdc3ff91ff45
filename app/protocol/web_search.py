"""The `web_search` tool (and `web_search_preview`) as the server runs it, against the search
backend its operator configured (app/web_search/): the tool checked and echoed, the functions the
model is offered in its place (a search; a page opened, and a pattern found in one, unless the
tool says `external_web_access: false`), which addresses its `filters.allowed_domains` lets
through, and what the model reads of a search or a page, each with the citation marker file search
uses (turned into `url_citation` annotations on the way out: workers/translation/citations.py).

What the tool's settings do here: `search_context_size` is how many results the model reads
(low 3, medium 5, high 10) and how much of a page (low 4,000 characters, medium 8,000, high
16,000); `user_location` is echoed and not used (SearXNG has no location); `external_web_access`
false is served as OpenAI serves it: search results only, no live page fetch.
"""

from __future__ import annotations

import json
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from app import errors
from app.protocol.file_search import marked
from app.protocol.shapes import Item, Tool
from app.protocol.validation import StrictModel, validate

TOOL_TYPES = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"})
FUNCTION_NAME = "web_search"
MAX_ALLOWED_DOMAINS = 100
MAX_QUERY_CHARS = 400
SNIPPET_CHARS = 800  # of one search result's text, as it is kept and the model reads it
RESULTS_BY_CONTEXT = {"low": 3, "medium": 5, "high": 10}
PAGE_CHARS_BY_CONTEXT = {"low": 4_000, "medium": 8_000, "high": 16_000}
MAX_PASSAGES = 5  # of a page, around a pattern found in it
PASSAGE_CHARS = 300  # on either side of the pattern

FUNCTION = {
    "name": FUNCTION_NAME,
    "description": (
        "Search the web. Use it for anything recent, or that you do not know for certain. "
        "Returns the top results, each with its title, address and a passage."
    ),
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to search for, as a search engine takes it."}},
        "required": ["query"],
        "additionalProperties": False,
    },
    "strict": True,  # (as file_search's: a small model's call then always parses)
}
OPEN_PAGE = {
    "name": "open_page",
    "description": "Open a web page (a search result's address) and read its text.",
    "parameters": {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The page's address."}},
        "required": ["url"],
        "additionalProperties": False,
    },
    "strict": True,
}
FIND_IN_PAGE = {
    "name": "find_in_page",
    "description": "Find a word or phrase in a web page and read the passages around it.",
    "parameters": {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The page's address."},
            "pattern": {"type": "string", "description": "The text to find (case does not matter)."},
        },
        "required": ["url", "pattern"],
        "additionalProperties": False,
    },
    "strict": True,
}


def functions(tool: Tool) -> list[dict[str, Any]]:
    """What the model is offered for the tool: the search, and the page's two unless it may not
    fetch pages."""
    if tool.get("external_web_access") is False:
        return [FUNCTION]
    return [FUNCTION, OPEN_PAGE, FIND_IN_PAGE]


class _Filters(StrictModel):
    allowed_domains: list[str] | None = Field(None, max_length=MAX_ALLOWED_DOMAINS)


class _UserLocation(StrictModel):
    type: Literal["approximate"] = "approximate"
    country: str | None = None
    region: str | None = None
    city: str | None = None
    timezone: str | None = None


class _WebSearchTool(StrictModel):
    type: Literal["web_search", "web_search_2025_08_26"]
    filters: _Filters | None = None
    user_location: _UserLocation | None = None
    search_context_size: Literal["low", "medium", "high"] = "medium"
    # Codex sends false by default (its "cached" mode); a boolean in OpenAI's schema, a mode's
    # name in some newer clients: any of them is served the same way here.
    external_web_access: bool | str | None = None


class _WebSearchPreviewTool(StrictModel):
    type: Literal["web_search_preview", "web_search_preview_2025_03_11"]
    user_location: _UserLocation | None = None
    search_context_size: Literal["low", "medium", "high"] = "medium"
    search_content_types: list[Literal["text", "image"]] | None = None


def parse_tool(entry: dict[str, Any], param: str) -> Tool:
    """The tool as a Response echoes it, its defaults filled in; a domain that names no host is a
    400 naming it."""
    model = _WebSearchPreviewTool if str(entry.get("type", "")).startswith("web_search_preview") else _WebSearchTool
    tool = validate(model, entry, prefix=param).model_dump(exclude_none=True)
    for index, domain in enumerate((tool.get("filters") or {}).get("allowed_domains") or []):
        if not _host(domain):
            raise errors.InvalidRequest(
                f"Invalid '{param}.filters.allowed_domains[{index}]': '{domain}' is not a domain.",
                param=f"{param}.filters.allowed_domains[{index}]",
                code="invalid_value",
            )
    return tool


def allowed_domains(tool: Tool) -> list[str]:
    """The tool's domains, as hosts: any scheme, path or leading `www.` dropped."""
    domains = (tool.get("filters") or {}).get("allowed_domains") or []
    return [host for host in map(_host, domains) if host]


def _host(domain: str) -> str:
    return (urlsplit(domain if "//" in domain else f"//{domain}").hostname or "").removeprefix("www.")


def is_allowed(url: str, domains: list[str]) -> bool:
    """Whether a result's address is under one of the domains (a subdomain is), or no domain is set."""
    if not domains:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return any(host == domain or host.endswith(f".{domain}") for domain in domains)


def action_of(function: str, arguments: str) -> Item:
    """The call's action, from the function the model called and its arguments."""
    parsed = _object(arguments)
    if function == OPEN_PAGE["name"]:
        return {"type": "open_page", "url": _text(parsed.get("url"))}
    if function == FIND_IN_PAGE["name"]:
        return {"type": "find_in_page", "url": _text(parsed.get("url")), "pattern": _text(parsed.get("pattern"))}
    return search_action(query_of(arguments), None)


def _object(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(value: Any) -> str:
    return value.strip()[:2048] if isinstance(value, str) else ""


def query_of(arguments: str) -> str:
    """The query of the model's call (the first of `queries`, for a model that writes a list)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    query = parsed.get("query", parsed.get("queries"))
    if isinstance(query, list):
        query = next((q for q in query if isinstance(q, str) and q.strip()), "")
    return query.strip()[:MAX_QUERY_CHARS] if isinstance(query, str) else ""


def search_action(query: str, results: list[Item] | None) -> Item:
    """A search's `action`, its sources those the model was given."""
    action: Item = {"type": "search", "query": query, "queries": [query] if query else []}
    if results is not None:
        action["sources"] = [{"type": "url", "url": result["url"]} for result in results]
    return action


def passages(text: str, pattern: str) -> list[str]:
    """The passages of a page's text around each place the pattern is found (case aside), at most
    MAX_PASSAGES, overlapping ones joined."""
    spans: list[tuple[int, int]] = []
    lowered, wanted = text.lower(), pattern.lower()
    at = lowered.find(wanted)
    while at >= 0 and len(spans) < MAX_PASSAGES:
        start, end = max(at - PASSAGE_CHARS, 0), min(at + len(wanted) + PASSAGE_CHARS, len(text))
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        at = lowered.find(wanted, at + len(wanted))
    return [text[start:end].strip() for start, end in spans]


def citation_of(result: Item) -> Item:
    """What a marker of this result becomes (its place in the text is added where it stands)."""
    return {"type": "url_citation", "url": result["url"], "title": result["title"]}


def for_the_model(results: list[Item], first_marker: int) -> str:
    """A search's results, or a page's text or passages, as the tool's answer: each with its
    marker, then how to cite."""
    if not results:
        return "The web search found nothing."
    return marked([_shown(result) for result in results], first_marker)


def call_of(item: Item) -> tuple[str, dict[str, Any]]:
    """The function a web_search_call's action was made by, and its arguments (a later turn's
    model reads the call as it made it)."""
    action = item.get("action") or {}
    kind = action.get("type")
    if kind == "open_page":
        return str(OPEN_PAGE["name"]), {"url": action.get("url") or ""}
    if kind in ("find_in_page", "find"):
        return str(FIND_IN_PAGE["name"]), {"url": action.get("url") or "", "pattern": action.get("pattern") or ""}
    return FUNCTION_NAME, {"query": action.get("query") or ", ".join(action.get("queries") or [])}


def without_markers(item: Item) -> str:
    """An earlier search or page, as a later turn's model reads it (it cites only its own turn's)."""
    action = item.get("action") or {}
    results = item.get("results")
    if results is None:
        if action.get("type") != "search":
            return f"Opened {action.get('url') or 'a page'}."
        searched = action.get("query") or ", ".join(action.get("queries") or [])
        return f"Searched the web for: {searched}" if searched else "Searched the web."
    if not results:
        return "The web search found nothing."
    return "\n".join(_shown(result) for result in results)


def _shown(result: Item) -> str:
    head = f'<result title="{result.get("title", "")}" url="{result.get("url", "")}">'
    return f"{head}\n{result.get('snippet', '')}\n</result>"

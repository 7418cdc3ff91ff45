"""The calls the server itself makes for a response, in its tool loop (workers/tool_loop/): an MCP
server's tools, a file search, a web search, a search of the deferred tools. What of a response's
settings says it has them."""

from __future__ import annotations

from typing import Any

CALL_TYPES = ("mcp_call", "file_search_call", "web_search_call", "tool_search_call")  # their items
SEARCH_CALL_TYPES = ("file_search_call", "web_search_call")


def runs_tools(settings: dict[str, Any]) -> bool:
    """Whether the response has tools the server runs (then its answers go through the loop)."""
    requested = settings.get("requested", {})
    return bool(requested.get("runs_mcp") or requested.get("runs_tool_search") or runs_searches(settings))


def runs_searches(settings: dict[str, Any]) -> bool:
    """Whether the model is given search results to cite (its markers become annotations)."""
    requested = settings.get("requested", {})
    return bool(requested.get("runs_file_search") or requested.get("runs_web_search"))

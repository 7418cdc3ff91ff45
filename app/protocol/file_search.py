"""The `file_search` tool as the server runs it: the tool checked and echoed with its defaults,
the function the model is offered in its place, and a search's results as the model reads them,
each with a citation marker that the answer's text may carry (turned into `file_citation`
annotations on the way out: workers/translation/citations.py).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from app import errors
from app.protocol.search_filters import parse_filter
from app.protocol.shapes import Item, Tool
from app.protocol.validation import StrictModel, validate

DEFAULT_MAX_RESULTS = 10
MAX_QUERIES = 5  # in one call: more are dropped
FUNCTION_NAME = "file_search"
MARKER_OPEN, MARKER_CLOSE = "【", "】"  # a citation: 【3】, the third result the model was given

FUNCTION = {
    "name": FUNCTION_NAME,
    "description": (
        "Search the user's files (documents uploaded to this assistant) for passages relevant to "
        "the queries. Use it for any question the files may answer."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": 5,
                "description": "One to five search queries, each a short phrase or question.",
            }
        },
        "required": ["queries"],
        "additionalProperties": False,
    },
    # Held to the schema where the engine holds arguments only of strict functions (vLLM's
    # named and required calls): a small model's search then always parses.
    "strict": True,
}


class _HybridSearch(StrictModel):
    embedding_weight: float = Field(ge=0)
    text_weight: float = Field(ge=0)


class _Ranking(StrictModel):
    ranker: Literal["auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(0.0, ge=0, le=1)
    hybrid_search: _HybridSearch | None = None


class _FileSearchTool(StrictModel):
    type: Literal["file_search"]
    vector_store_ids: list[str] = Field(min_length=1, max_length=16)
    max_num_results: int | None = Field(None, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: _Ranking | None = None


def parse_tool(entry: dict[str, Any], param: str) -> Tool:
    """The tool as a Response echoes it, its defaults filled in (OpenAI's echo shows them)."""
    tool = validate(_FileSearchTool, entry, prefix=param)
    if tool.filters is not None:
        parse_filter(tool.filters, f"{param}.filters")
    ranking = tool.ranking_options or _Ranking()
    if ranking.hybrid_search is not None and not (
        ranking.hybrid_search.embedding_weight or ranking.hybrid_search.text_weight
    ):
        raise errors.InvalidRequest(
            f"Invalid '{param}.ranking_options.hybrid_search': one of the weights must be above 0.",
            param=f"{param}.ranking_options.hybrid_search",
            code="invalid_value",
        )
    return {
        "type": "file_search",
        "vector_store_ids": tool.vector_store_ids,
        "filters": tool.filters,
        "max_num_results": tool.max_num_results or DEFAULT_MAX_RESULTS,
        "ranking_options": ranking.model_dump(exclude_none=True),
    }


def queries_of(arguments: str) -> list[str]:
    """The queries of the model's call (a lone `query` taken too), at most MAX_QUERIES."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    queries = parsed.get("queries", parsed.get("query"))
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list):
        return []
    return [q.strip() for q in queries if isinstance(q, str) and q.strip()][:MAX_QUERIES]


def citation_of(result: Item) -> Item:
    """What a marker of this result becomes (its place in the text is added where it stands)."""
    return {"type": "file_citation", "file_id": result["file_id"], "filename": result["filename"]}


def for_the_model(results: list[Item], first_marker: int) -> str:
    """A search's results as the tool's answer: each with its marker, then how to cite."""
    if not results:
        return "The search found nothing in the files."
    return marked([f'<result file="{r["filename"]}">\n{r["text"]}\n</result>' for r in results], first_marker)


def marked(results: list[str], first_marker: int) -> str:
    """Results (each `<result …>…</result>`) given their markers in turn from `first_marker`,
    then how to cite them: what the model reads of any search."""
    parts = [
        result.replace("<result ", f'<result marker="{MARKER_OPEN}{n}{MARKER_CLOSE}" ', 1)
        for n, result in enumerate(results, first_marker)
    ]
    example = f"{MARKER_OPEN}{first_marker}{MARKER_CLOSE}"
    parts.append(
        f"Answer from these results. After each statement that uses one, write its marker (such as {example})."
    )
    return "\n".join(parts)

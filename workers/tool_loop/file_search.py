"""The tool loop's file_search kind: the model's call searches the request's vector stores (the
caller's, checked when the request came; a store deleted since is skipped), as the tool's
`max_num_results`, `filters` and `ranking_options` say. The call is a `file_search_call` item with
its `queries`, opened as OpenAI streams it (added, in_progress, searching) and closed with its
results (completed; kept in the item, shown to clients under `include`). The model reads each
result with a citation marker; the markers become `file_citation` annotations (the translator's
citations). A call without queries (a small model's, even held to the schema) searches what the
user last said. A search changes nothing: one in flight when its worker stopped is made again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.embeddings.embedders import EmbeddingFailed
from app.protocol.file_search import citation_of, for_the_model, queries_of
from app.protocol.input_items import item_text
from app.protocol.response_object import ResponseRecord
from app.protocol.search_filters import parse_filter
from app.protocol.shapes import Event, Item
from app.protocol.vector_store_request import MAX_QUERY_CHARS
from app.retrieval.search import search_stores
from app.storage import vector_stores as stores_db
from workers.state import WorkerState
from workers.translation.output_items import FileSearchCallOutput, HostedCallOutput
from workers.translation.translate import StreamTranslator

log = logging.getLogger(__name__)


@dataclass
class FileSearchKind:
    state: WorkerState
    record: ResponseRecord
    translator: StreamTranslator
    asked: str = ""  # what the user last said: the query of a call that gives none

    @property
    def tool(self) -> dict[str, Any]:
        return next(tool for tool in self.record.settings["tools"] if tool["type"] == "file_search")

    def handles(self, call: HostedCallOutput) -> bool:
        return isinstance(call, FileSearchCallOutput)

    async def prepare(self, context: list[Item]) -> None:
        """What the user last said: the query of a call that gives none."""
        said = (item_text(item).strip() for item in reversed(context) if item.get("role") == "user")
        self.asked = next((text for text in said if text), "")[:MAX_QUERY_CHARS]  # (the last only is read)

    def opening(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, FileSearchCallOutput)
        return call.opening(queries_of(call.arguments) or call.queries)

    async def make(self, call: HostedCallOutput) -> list[Event]:
        assert isinstance(call, FileSearchCallOutput)
        if not call.queries and self.asked:
            call.queries = [self.asked]
        if not call.queries:
            return call.closing([], "The search was called without queries: give it one or more.")
        try:
            results = await self._search(call.queries)
        except EmbeddingFailed as failed:
            log.warning("response %s: file search failed: %s", self.record.id, failed)
            return call.closing(None, f"The search failed: {failed}.")
        first_marker = len(self.translator.citations) + 1
        self.translator.citations += [citation_of(result) for result in results]
        return call.closing(results, for_the_model(results, first_marker))

    async def make_interrupted(self, call: HostedCallOutput) -> list[Event]:
        return await self.make(call)

    async def _search(self, queries: list[str]) -> list[Item]:
        tool = self.tool
        ranking = tool.get("ranking_options") or {}
        hybrid = ranking.get("hybrid_search") or {}
        account_id = self.record.settings["requested"].get("account_id")
        async with self.state.engine.connect() as conn:
            stores = await stores_db.get_many(conn, account_id, tool["vector_store_ids"])
        found = await search_stores(
            self.state.engine,
            self.state.embedders,
            self.state.catalog,
            [store for store in stores if not store.expired],
            queries,
            limit=tool["max_num_results"],
            filters=None if tool.get("filters") is None else parse_filter(tool["filters"], "filters"),
            score_threshold=ranking.get("score_threshold", 0.0),
            embedding_weight=hybrid.get("embedding_weight", 1.0),
            text_weight=hybrid.get("text_weight", 1.0),
        )
        return [
            {
                "file_id": hit.file_id,
                "filename": hit.filename,
                "score": hit.score,
                "text": hit.text,
                "attributes": hit.attributes,
            }
            for hit in found
        ]

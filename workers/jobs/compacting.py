"""Compaction in a worker: the model's summary of a context, sealed into a compaction item
(workers/translation/compaction.py says what the model is asked and later sent); and, for a response
created with `context_management`, that compaction made before its answer once its context
passes the threshold, shown as its first output item.

OpenAI streams such a compaction as an output item of its own: `response.output_item.added`,
`response.compaction.compacting` once its summary is being written (no summary content), and
`response.output_item.done` carrying the item; the answer's items follow it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from app.catalog import ModelEntry
from app.events.writer import Emit
from app.protocol.ids import new_id
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from workers.runtime_failure import CONTEXT_LENGTH_EXCEEDED, RuntimeFailure
from workers.state import WorkerState
from workers.translation import compaction
from workers.translation.chat_request import chat_request
from workers.translation.translate import StreamTranslator

TOKEN_BYTES = 4  # a token's bytes, as OpenAI estimates them, where the model's server cannot count


async def summarize(
    state: WorkerState,
    record: ResponseRecord,
    model: ModelEntry,
    context: list[Item],
    item_id: str | None = None,
    on_sampling: Callable[[], None] | None = None,
    left: int = 0,
) -> tuple[Item, dict[str, Any]]:
    """The compaction item of `context`, and the usage of the call that wrote its summary.
    `on_sampling` is called once, when the summary's first words come. `left`: items after
    `context`, left out of the summary, that the item will follow."""
    if state.seal is None:
        raise RuntimeFailure("compaction needs an encryption key (RESPONSES_ENCRYPTION_KEYS) on the worker")
    settings = compaction.summary_settings(record.settings)
    translator = StreamTranslator.for_settings(settings)
    body = chat_request(replace(record, settings=settings), compaction.summary_request(context, state.seal), model)

    def collect(chunk: dict[str, Any]) -> None:
        sampled = translator.content_chunks
        translator.on_chunk(chunk)  # its events are not written: only the summary it makes is kept
        if on_sampling is not None and not sampled and translator.content_chunks:
            on_sampling()

    # Whatever does not fit the model is left out of the summary (its oldest turns), not refused.
    await state.runtime.stream(model, body, collect, truncate=True)
    _, output = translator.close()
    summary = "".join(part.get("text", "") for item in output if item["type"] == "message" for part in item["content"])
    if not summary.strip():
        raise RuntimeFailure("the model wrote no summary")
    sealed = compaction.sealed_summary(state.seal, summary, left)
    item = {"id": item_id or new_id("cmp"), "type": "compaction", "encrypted_content": sealed}
    return item, translator.usage_object()


async def compacted_if_due(
    state: WorkerState,
    record: ResponseRecord,
    model: ModelEntry,
    context: list[Item],
    translator: StreamTranslator,
    emit: Emit,
) -> list[Item]:
    """The context to answer `record` from: compacted first when it asked for compaction
    (`context_management`) and its context passes the threshold. What is folded is what came
    before the turn being answered (workers/translation/compaction.py); a context that would not
    fit even so is refused before any summary is asked for, unless `truncation` is `auto`
    (truncation then makes room). The compaction item becomes the answer's first output item
    (`translator.before`), its summary's usage part of the answer's; `emit` writes its events."""
    if not compaction.asked(record.settings):  # (most responses: no request is built for nothing)
        return context
    body = chat_request(record, compaction.model_view(context, state.seal), model, translator.tools)
    max_tokens = int(body["max_tokens"])
    limit = compaction.threshold(record.settings, model.context_window, max_tokens)
    if limit is None or not await _passes(state, model, body, limit):
        return context
    start = compaction.turn_start(context)
    folded, turn = context[:start], context[start:]
    if not any(item["type"] != "compaction" for item in folded):  # nothing before this turn to fold
        return context
    if record.settings.get("truncation") != "auto":
        await _check_fits_compacted(state, record, model, folded, turn, translator, max_tokens)
    item_id = new_id("cmp")
    emit([_item_event("added", {"id": item_id, "type": "compaction", "encrypted_content": ""})])
    sampling = {"type": "response.compaction.compacting", "item_id": item_id, "output_index": 0}
    item, usage = await summarize(state, record, model, folded, item_id, lambda: emit([sampling]), left=len(turn))
    emit([_item_event("done", item)])
    translator.before, translator.before_usage = [item], usage
    return [*context, item]


async def _check_fits_compacted(
    state: WorkerState,
    record: ResponseRecord,
    model: ModelEntry,
    folded: list[Item],
    turn: list[Item],
    translator: StreamTranslator,
    max_tokens: int,
) -> None:
    """Refuses (context_length_exceeded) a context whose part no summary replaces (the user's
    messages before this turn, and the turn itself) leaves the answer no room."""
    body = chat_request(record, [*compaction.own_words(folded), *turn], model, translator.tools)
    if await _passes(state, model, body, model.context_window - max_tokens):
        raise RuntimeFailure(
            f"Even compacted, this context leaves no room for the answer in the model's context of "
            f"{model.context_window} tokens: the user's messages and the turn being answered are too long. "
            "Set truncation to 'auto' to drop the oldest turns.",
            code=CONTEXT_LENGTH_EXCEEDED,
        )


async def _passes(state: WorkerState, model: ModelEntry, body: dict[str, Any], limit: int) -> bool:
    """Whether the request's prompt is longer than `limit` tokens: counted by the model's
    server where it can count (a token covers at least one byte, so a prompt of fewer bytes is
    not asked about), else estimated from its bytes."""
    size = len(orjson.dumps(body["messages"])) + len(orjson.dumps(body.get("tools") or []))
    if model.prompt_measure == "none":
        return size // TOKEN_BYTES > limit
    if size <= limit:
        return False
    counted = await state.runtime.count_prompt(model, body)
    return (size // TOKEN_BYTES if counted is None else counted) > limit


def _item_event(stage: str, item: Item) -> Event:
    return {"type": f"response.output_item.{stage}", "output_index": 0, "item": item}

"""The `count_input_tokens` job: a request's input tokens as its model server counts them
(app/service/input_tokens.py asks). The answer goes to a Redis key the asking API process waits on; a
failure goes there too, as the message the client gets."""

from __future__ import annotations

import logging
from typing import Any

from app.protocol.response_object import ResponseRecord
from app.queue import replies
from workers.runtime_failure import RuntimeFailure
from workers.state import WorkerState
from workers.translation import compaction
from workers.translation.chat_request import chat_request

log = logging.getLogger(__name__)


async def count_input_tokens(ctx: dict[str, Any], count_id: str, job: dict[str, Any]) -> None:
    state: WorkerState = ctx["state"]
    record = ResponseRecord(**job["record"])
    answer: dict[str, Any]
    try:
        model = state.catalog.by_name.get(record.model)
        if model is None:
            raise RuntimeFailure(f"model '{record.model}' is not in this worker's catalog")
        if state.supervisor is not None:  # its model server may be restarting
            await state.supervisor.wait_healthy(state.supervisor.startup_timeout)
        truncate = record.settings.get("truncation") == "auto"
        context = compaction.model_view(job["context"], state.seal)
        tokens = await state.runtime.count_prompt(model, chat_request(record, context, model), truncate=truncate)
        answer = {"input_tokens": tokens} if tokens is not None else {"error": "this model server cannot count"}
    except RuntimeFailure as exc:
        answer = {"error": str(exc)}
    await replies.answer(state.redis, count_id, answer)

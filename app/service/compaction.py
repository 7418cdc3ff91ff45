"""`POST /v1/responses/compact`: a context folded into a summary the model writes of it.

The compaction is a stored response like any other (its context: the chain of
`previous_response_id`, then `input`), whose one output item is a `compaction` item sealing the
summary (workers/translation/compaction.py writes it). Its id works as `previous_response_id`; the
answer is OpenAI's `response.compaction`: the context's user messages as they were, then that
item.
"""

from __future__ import annotations

from typing import Any

from app import errors
from app.protocol import compact_request
from app.service import creation
from app.service.idempotency import IdempotencyKey
from app.service.state import AppState
from app.storage import items as items_db
from app.storage.accounts import Caller


async def compact(
    state: AppState, caller: Caller, body: dict[str, Any], body_bytes: int, key: IdempotencyKey | None = None
) -> creation.Created:
    create_body = compact_request.as_create(body)
    if state.seal is None:
        raise errors.InvalidRequest(
            "Compaction needs an encryption key on this server (RESPONSES_ENCRYPTION_KEYS): "
            "the summary is sealed with it.",
            param=None,
            code="compaction_unavailable",
        )
    return await creation.create(state, caller, create_body, body_bytes, compaction=True, key=key)


async def answer(state: AppState, response: dict[str, Any]) -> dict[str, Any]:
    """The compacted context of a compaction that ended: its user messages, then its item."""
    async with state.engine.connect() as conn:
        context = await items_db.context_items(conn, response["id"])
    # (as items are shown: the id first)
    kept = [{"id": item["id"], **item} for item in context if item["type"] == "message" and item["role"] == "user"]
    return {
        "id": response["id"],
        "object": "response.compaction",
        "created_at": response["created_at"],
        "output": kept + response["output"],
        "usage": response["usage"],
    }

"""`POST /v1/responses/input_tokens`: how many input tokens a create request would use, as its
model server counts them (chat template, tools and the chain's history included).

Only a worker can ask a model server: a hosted model's server is started by its worker, and the
translation to a chat request is the worker's. So the API validates the body as a create would
(the same 400s, except that `input` may be left out), rebuilds the chain's context, and hands a
`count_input_tokens` job to the model's queue; the worker that takes it counts (vLLM's
/tokenize, llama.cpp's one-token request) and pushes the answer to a Redis key only this request
waits on. Nothing is stored.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app import errors
from app.protocol.ids import new_id
from app.queue import replies
from app.queue.redis_keys import COUNT_TOKENS_JOB
from app.queue.redis_link import REDIS_DOWN
from app.service.state import AppState
from app.service.storing import chain_link
from app.service.validating import new_record, validated
from app.storage import conversations as conversations_db
from app.storage import items as items_db


async def count(state: AppState, account_id: str, body: dict[str, Any]) -> dict[str, Any]:
    create, model = await validated(state, account_id, body, input_optional=True)  # as OpenAI's: a chain alone counts
    if model.prompt_measure == "none":
        raise errors.InvalidRequest(
            f"Invalid 'model': the server of '{model.id}' cannot count tokens "
            "(vllm and llamacpp models can, and openai ones with `tokenize = true`).",
            param="model",
            code="unsupported_value",
        )
    context: list[dict[str, Any]] = []
    previous_id = create.request.previous_response_id
    if previous_id is not None:
        async with state.engine.connect() as conn:
            link = await chain_link(conn, account_id, previous_id, create.input_items)
            context = await items_db.context_items(conn, str(link.parent_id), own_output=True)
    elif create.conversation_id is not None:
        async with state.engine.connect() as conn:
            if await conversations_db.get(conn, account_id, create.conversation_id) is None:
                raise errors.conversation_not_found(create.conversation_id, param="conversation")
            context = await conversations_db.all_items(conn, create.conversation_id)
    count_id = new_id("req")
    job = {"record": asdict(new_record(create, model)), "context": context + create.input_items}
    queue_name = state.catalog.queue_for(model.id, state.settings.queue_name)
    try:
        counted = await replies.ask(
            state.redis, queue_name, COUNT_TOKENS_JOB, count_id, (job,), state.settings.count_timeout
        )
    except REDIS_DOWN as exc:
        raise errors.ServiceUnavailable("The job queue (Redis) is unavailable; please retry.") from exc
    if counted is None:
        raise errors.ServiceUnavailable(
            f"No worker of the model '{model.id}' counted the tokens in time; please retry."
        )
    if "error" in counted:
        raise errors.GenerationFailed(f"The model server could not count the tokens: {counted['error']}")
    return {"object": "response.input_tokens", "input_tokens": counted["input_tokens"]}

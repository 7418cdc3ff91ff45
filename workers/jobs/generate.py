"""The one arq job: claim a response, stream it from its runtime into the event log, end it.

arq may deliver a job twice; the claim is a compare-and-set, so the second delivery finds
nothing to do (design invariant 4). Every way a generation can end (ran to its end, runtime
failure, stop request) ends in exactly one terminal status and one terminal event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from app.catalog import ModelEntry
from app.process.metrics import FINISHED, INPUT_TOKENS, OUTPUT_TOKENS, TIME_TO_FIRST_TOKEN
from app.protocol.input_items import Item
from app.protocol.lifecycle import lifecycle_event, terminal_event
from app.protocol.response_object import ResponseRecord
from app.protocol.vocabulary import OUTPUT_DELTAS
from app.queue.redis_keys import ALIVE_PREFIX, TRANSIENT_CLAIM_PREFIX
from app.queue.redis_link import REDIS_LINK
from app.service import admission
from app.storage import items as items_db
from app.storage import responses as responses_db
from workers.runtimes.chat_request import chat_request
from workers.runtimes.errors import RuntimeFailure
from workers.runtimes.output_items import Event
from workers.runtimes.translate import StreamTranslator
from workers.state import WorkerState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Generation:
    record: ResponseRecord
    model: ModelEntry | None
    context: list[Item]


async def generate(ctx: dict[str, Any], response_id: str, transient: dict[str, Any] | None = None) -> None:
    state: WorkerState = ctx["state"]
    if transient is None:
        generation = await _claim_durable(state, response_id)
    else:
        generation = await _claim_transient(state, response_id, transient)
    if generation is not None:
        await _run(state, generation)


async def _claim_durable(state: WorkerState, response_id: str) -> Generation | None:
    claim = await state.claims(response_id)
    if claim is None:
        log.info("response %s: already claimed or ended; nothing to do", response_id)
        return None
    record = claim.record
    return Generation(record, state.catalog.by_name.get(record.model), claim.context)


async def _claim_transient(state: WorkerState, response_id: str, job: dict[str, Any]) -> Generation | None:
    claimed = await state.redis.set(
        TRANSIENT_CLAIM_PREFIX + response_id, state.worker_id, nx=True, ex=state.settings.job_timeout_seconds
    )
    if not claimed:
        return None
    await state.redis.set(ALIVE_PREFIX + response_id, state.worker_id, ex=int(state.settings.lease_seconds) + 1)
    state.transient.add(response_id)
    record = ResponseRecord(**{**job["record"], "status": "in_progress"})
    context: list[Item] = []
    if record.previous_response_id:
        async with state.engine.connect() as conn:
            context = await items_db.context_items(conn, record.previous_response_id, own_output=True)
    state.writer.open_transient(response_id)
    return Generation(record, state.catalog.by_name.get(record.model), context + job["input"])


async def _run(state: WorkerState, generation: Generation) -> None:
    record = generation.record
    translator = StreamTranslator.for_settings(record.settings, state.seal)
    # The runtime request goes out first: it, not these events' commit, is what the first token waits on.
    task = asyncio.create_task(_stream(state, generation, translator))
    opening = [] if record.background else [lifecycle_event("response.created", record)]
    state.writer.append(record.id, [*opening, lifecycle_event("response.in_progress", record)])
    state.running[record.id] = task
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        # The job itself was cancelled: the worker is shutting down past its grace period, or
        # arq timed the job out. End the response cleanly now rather than leave it to the reaper.
        task.cancel()
        interrupted = _failed("The worker shut down before this response finished.", translator.partial_output())
        await asyncio.shield(_finish(state, record, [], interrupted))
        raise
    finally:
        state.running.pop(record.id, None)
    try:
        closing, outcome = _ending(task, translator)
    except Exception:  # whatever the runtime sent, the response must end: never leave it running
        log.exception("response %s: its outcome could not be made", record.id)
        closing, outcome = [], _failed(INTERNAL_ERROR)
    await _finish(state, record, closing, outcome)


async def _finish(
    state: WorkerState, record: ResponseRecord, closing: list[Event], outcome: responses_db.Outcome
) -> None:
    writer = state.writer
    ended = not writer.refused(record.id) and await writer.finish(
        record.id, [*closing, terminal_event(outcome.applied_to(record))], outcome
    )
    if not ended and writer.refused(record.id):  # Postgres refused its events: it ends without them
        outcome = _failed("The response's output could not be stored.")
        ended = await writer.finish(record.id, [terminal_event(outcome.applied_to(record))], outcome)
    if not ended:
        log.info("response %s ended elsewhere first; its %s is discarded", record.id, outcome.status)
    else:
        FINISHED.labels(record.model, outcome.status).inc()
        if outcome.usage:
            INPUT_TOKENS.labels(record.model).inc(outcome.usage.get("input_tokens") or 0)
            OUTPUT_TOKENS.labels(record.model).inc(outcome.usage.get("output_tokens") or 0)
            await _settle_tokens(state, record, outcome.usage)
    if record.id in state.transient:
        state.transient.discard(record.id)
        # Kept while its last events wait for Redis: its follower waits for them. Else it expires.
        if not state.writer.holds(record.id):
            with REDIS_LINK.tolerated("ending a store=false response"):
                await state.redis.delete(ALIVE_PREFIX + record.id)


async def _settle_tokens(state: WorkerState, record: ResponseRecord, usage: dict[str, Any]) -> None:
    """The account's tokens this minute: the real count in place of the admission's estimate."""
    admitted = record.settings.get("admission")
    if admitted is None:
        return
    try:
        await admission.settle(
            state.redis, admitted["tokens_key"], (usage.get("total_tokens") or 0) - admitted["estimate"]
        )
    except Exception:  # the estimate stays counted: the account is limited a little early, not late
        log.warning("response %s: could not settle its tokens", record.id, exc_info=True)


INTERNAL_ERROR = "internal error during generation"


def _failed(message: str, output: list[Item] | None = None) -> responses_db.Outcome:
    """A failure of ours (not the runtime's), with what output there is to keep."""
    error = {"code": "server_error", "message": message}
    return responses_db.Outcome("failed", output or [], time.time(), error=error)


async def _stream(state: WorkerState, generation: Generation, translator: StreamTranslator) -> None:
    if generation.model is None:
        raise RuntimeFailure(f"model '{generation.record.model}' is not in this worker's catalog")
    body = chat_request(generation.record, generation.context, generation.model, translator.tools)
    if state.supervisor is not None:  # its model server may be restarting
        await state.supervisor.wait_healthy(state.supervisor.startup_timeout)
    response_id = generation.record.id
    first_token = TIME_TO_FIRST_TOKEN.labels(generation.record.model)
    waiting_for_first = True

    def translate(chunk: dict[str, Any]) -> None:
        nonlocal waiting_for_first
        if events := translator.on_chunk(chunk):
            state.writer.append(response_id, events)
            if waiting_for_first and any(event["type"] in OUTPUT_DELTAS for event in events):
                waiting_for_first = False
                first_token.observe(time.time() - generation.record.created_at)

    await state.runtime.stream(generation.model, body, translate)


def _ending(
    task: asyncio.Task[None],
    translator: StreamTranslator,
) -> tuple[list[Event], responses_db.Outcome]:
    now = time.time()
    if task.cancelled():
        return [], responses_db.Outcome("cancelled", translator.partial_output(), now)
    error = task.exception()
    if error is not None:
        if isinstance(error, RuntimeFailure):
            failure = {"code": error.code, "message": str(error)}
        else:
            log.error("generation failed", exc_info=error)
            return [], _failed(INTERNAL_ERROR, translator.partial_output())
        return [], responses_db.Outcome("failed", translator.partial_output(), now, error=failure)
    events, output = translator.close()
    reason = translator.incomplete_reason
    return events, responses_db.Outcome(
        "incomplete" if reason else "completed",
        output,
        now,
        usage=translator.usage_object(),
        incomplete_details={"reason": reason} if reason else None,
    )

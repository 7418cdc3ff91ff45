"""The one arq job: claim a response, stream it from its runtime into the event log, end it.

arq may deliver a job twice; the claim is a compare-and-set, so the second delivery finds
nothing to do (design invariant 4). Every way a generation can end (ran to its end, runtime
failure, stop request) ends in exactly one terminal status and one terminal event.

A generation whose worker stopped or died goes on in another worker (invariant 4: never re-run
from scratch): the claim takes it up with the output its log holds, the runtime is asked to go on
from that text (workers/translation/chat_request.py `continuing`), and its events continue from the
next sequence number. A worker shut down hands its generations over the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.catalog import ModelEntry
from app.events.writer import Emit
from app.process.metrics import CACHED_INPUT_TOKENS, FINISHED, INPUT_TOKENS, OUTPUT_TOKENS, TIME_TO_FIRST_TOKEN
from app.protocol import tool_search
from app.protocol.accumulate import continuable, stopped
from app.protocol.hosted_calls import SEARCH_CALL_TYPES, runs_tools
from app.protocol.lifecycle import lifecycle_event, terminal_event
from app.protocol.response_object import ResponseRecord
from app.protocol.shapes import Event, Item
from app.protocol.vocabulary import OUTPUT_DELTAS, Status
from app.queue import mcp_credentials, rate_counters, transient_runs
from app.queue.jobs import CarriedResponse, enqueue_generate
from app.queue.redis_link import REDIS_LINK
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage import steers as steers_db
from app.storage.driver import autocommit
from workers.jobs import compacting, start_times
from workers.jobs.start_times import StartTimes
from workers.runtime_failure import RuntimeFailure
from workers.state import WorkerState
from workers.tool_loop.loop import MAX_TOOL_ROUNDS, ToolLoop
from workers.translation import compaction
from workers.translation.chat_request import chat_request, continuing, with_refusals
from workers.translation.tools import RuntimeTools
from workers.translation.translate import STEERED, AnswerSteered, StreamTranslator

log = logging.getLogger(__name__)


# Claims a response whose generation started before it was claimed (`_run_afresh`): the times it
# was continued before, or None if it was not claimed.
Claiming = Callable[[], Awaitable[int | None]]


@dataclass(frozen=True, slots=True)
class Generation:
    record: ResponseRecord
    model: ModelEntry | None
    context: list[Item]
    times: StartTimes
    # Above 0: the n-th continuation of a generation another worker began, from `output`, what
    # its log holds.
    continuations: int = 0
    output: list[Item] | None = None
    log_end: int = -1  # a continuation's: the number of the last event its log holds
    rounds_usage: dict[str, Any] | None = None  # a continued tool loop's: its finished rounds' usage


async def generate(
    ctx: dict[str, Any], response_id: str, transient: dict[str, Any] | None = None, fresh: dict[str, Any] | None = None
) -> None:
    """`transient`: a store=false response, carried by its job; `fresh`: a stored one that starts
    afresh, carried by its job too (app/queue/jobs.py `CarriedResponse`). A job taken again (the
    worker that took it stopped or died) claims first even so: its response may have been
    released to be continued, and would be asked for from scratch in vain; one whose worker was
    to store it is stored first, if that worker died before."""
    state: WorkerState = ctx["state"]
    # A response may have two jobs (its first and a continuation's): in one worker, one runs it.
    if response_id in state.taken:
        log.info("response %s: this worker runs it already; nothing to do", response_id)
        return
    state.taken.add(response_id)
    times = StartTimes.of_job(ctx)
    try:
        if fresh is not None and ctx.get("job_try", 1) == 1:
            await _run_afresh(state, response_id, CarriedResponse.decoded(fresh), times)
        elif transient is None:
            if fresh is not None and (carried := CarriedResponse.decoded(fresh)).stored_for is not None:
                async with autocommit(state.engine) as conn:
                    await responses_db.insert_responses(conn, [_as_stored(carried, "queued")])
            await _run_durable(state, response_id, times)
        else:
            await _run_transient(state, response_id, CarriedResponse.decoded(transient), times)
    finally:
        state.taken.discard(response_id)
        state.steered.discard(response_id)


async def _run_durable(state: WorkerState, response_id: str, times: StartTimes) -> None:
    """Claims the stored response (queued → in_progress, or a released one to continue from what
    its log holds) and runs its generation."""
    claim = await state.claim(response_id)
    if claim is None:
        log.info("response %s: already claimed or ended; nothing to do", response_id)
        return
    await _run_claimed(state, claim, times)


async def _run_claimed(state: WorkerState, claim: responses_db.Claim, times: StartTimes) -> None:
    record, response_id = claim.record, claim.record.id
    output, log_end, rounds_usage = None, -1, None
    if claim.continuations:  # nobody writes its log while it has no worker: this is all of it
        async with state.engine.begin() as conn:
            output, log_end = await events_db.output_and_log_end(conn, response_id)
            rounds_usage = await responses_db.rounds_usage(conn, response_id)
            if await steers_db.waiting(conn, response_id):  # (its first worker was told; this one was not)
                state.steered.add(response_id)
    model = state.catalog.by_name.get(record.model)
    times.claimed_now(record.model)
    await _run(
        state, Generation(record, model, claim.context, times, claim.continuations, output, log_end, rounds_usage)
    )


async def _run_afresh(state: WorkerState, response_id: str, carried: CarriedResponse, times: StartTimes) -> None:
    """Runs a stored response that starts afresh from what its job carries: its runtime request goes
    out at once, while it is claimed (its row may still be being written: `claim_when_stored`),
    and its events are held until the claim is made; if it is not, they are dropped and the
    request cancelled. Its context is its input, so nothing needs reading first. (Its job may
    still be being taken: app/queue/arq_seam.py `_run_while_taken`; the claim alone decides
    whether it runs here.)"""
    record = carried.record.evolve(status="in_progress")
    state.writer.hold(response_id)
    if carried.stored_for is None:
        claim = partial(state.claim_when_stored, response_id)
    else:  # a foreground one: stored by this claim
        claim = partial(state.claim_by_storing, _as_stored(carried, "in_progress"))
    try:
        await _run(state, Generation(record, state.catalog.by_name.get(record.model), carried.input, times), claim)
    finally:
        state.writer.drop_held(response_id)  # (nothing is held once it was claimed)


def _as_stored(carried: CarriedResponse, status: Status) -> responses_db.NewResponse:
    """A response its worker stores (app/service/enqueueing.py): it continues nothing."""
    assert carried.stored_for is not None
    record = carried.record.evolve(status=status)
    return responses_db.NewResponse(record, carried.stored_for, responses_db.ChainLink(None, 0), carried.input)


async def _run_transient(state: WorkerState, response_id: str, job: CarriedResponse, times: StartTimes) -> None:
    """Claims a store=false response in Redis (its job carries the record) and runs its generation,
    its events numbered by the writer and only published."""
    if not await transient_runs.claim(state.redis, response_id, state.worker_id, state.settings.job_timeout_seconds):
        return
    await transient_runs.say_alive(state.redis, [response_id], state.worker_id, state.settings.lease_seconds)
    state.transient.add(response_id)
    record = job.record.evolve(status="in_progress")
    context: list[Item] = []
    if record.previous_response_id:
        async with state.engine.connect() as conn:
            context = await items_db.context_items(conn, record.previous_response_id, own_output=True)
    state.writer.open_transient(response_id)
    times.claimed_now(record.model)
    await _run(state, Generation(record, state.catalog.by_name.get(record.model), context + job.input, times))


async def _run(state: WorkerState, generation: Generation, claim: Claiming | None = None) -> None:
    """`claim`: makes the claim of a response started before it was made (`_run_afresh`)."""
    record = generation.record
    if record.settings.get("compaction"):
        await _run_compaction(state, generation)
        return
    translator = StreamTranslator.for_settings(record.settings, state.seal)
    translator.steered = record.id in state.steered
    prefix = None
    if generation.continuations:
        if not continuable(generation.output or [], record.settings):  # (its releaser checked: a safeguard)
            await _finish(state, generation, [], _failed(NOT_CONTINUABLE, stopped(generation.output or [])))
            return
        prefix = translator.continue_from(generation.output or [])
        translator.before_usage = generation.rounds_usage
        state.writer.expect(record.id, generation.log_end + 1)  # (its first commit, too, is recognized)
    if tool_search.loads_tools(generation.context) or tool_search.loads_tools(translator.before):
        # (the tools earlier searches loaded are offered again)
        translator.tools = RuntimeTools.for_settings(record.settings, context=[*generation.context, *translator.before])
    # The runtime request goes out first: it, not these events' commit, is what the first token waits on.
    task = asyncio.create_task(_stream(state, generation, translator, prefix))
    generation.times.asked_now(record.model)
    if claim is not None:
        continuations = await _claimed_beside(task, claim, generation.times)
        if continuations is None or continuations:  # not this worker's, or to be continued: not from scratch
            log.info("response %s: already claimed, ended or released; its runtime request is cancelled", record.id)
            task.cancel()
            await asyncio.wait({task})
            state.writer.drop_held(record.id)
            if continuations is not None:  # a first job delivered again, its response released to be continued
                claimed = responses_db.Claim(record, generation.context, continuations)
                await _run_claimed(state, claimed, generation.times)
            return
        generation.times.claimed_now(record.model)
    if prefix is None:  # (a continuation's log has them already)
        opening = [] if record.background else [lifecycle_event("response.created", record)]
        # (a background response's create stored `created` and `queued`; a foreground one's, nothing)
        state.writer.expect(record.id, 2 if record.background else 0)
        state.writer.open(record.id, [*opening, lifecycle_event("response.in_progress", record)])
    state.running[record.id] = task
    state.translators[record.id] = translator
    holding = asyncio.ensure_future(_hold_contexts_once_answering(state, generation, task))
    try:
        await asyncio.wait({task})
        await holding
    except asyncio.CancelledError:
        # The job itself was cancelled: the worker is shutting down (at once, another worker
        # being alive, or past its grace period), or arq timed the job out. Hand the generation
        # over to be continued, or end it cleanly now rather than leave it to the reaper.
        task.cancel()
        holding.cancel()
        await asyncio.shield(_hand_over(state, generation, task, translator))
        raise
    finally:
        state.running.pop(record.id, None)
        state.translators.pop(record.id, None)
    try:
        closing, outcome = _ending(task, translator, generation, prefix or "")
    except Exception:  # whatever the runtime sent, the response must end: never leave it running
        log.exception("response %s: its outcome could not be made", record.id)
        closing, outcome = [], _failed(INTERNAL_ERROR)
    await _finish(state, generation, closing, outcome)


async def _hold_contexts_once_answering(state: WorkerState, generation: Generation, task: asyncio.Task[None]) -> None:
    """Tells placement that this worker's engine holds the response's contexts once its first output
    is committed (or its answer ended without one): the round trip then does not share the CPU
    with the runtime request and the commit that the first token waits on, and is made before the
    response ends, which the next turn of its chain waits for."""
    answering = asyncio.ensure_future(generation.times.answering.wait())
    try:
        await asyncio.wait({task, answering}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        answering.cancel()
    if not task.done():
        try:
            if await state.writer.committed(generation.record.id):
                generation.times.committed_now(generation.record.model)
        except Exception:  # (the commit gave up: the generation meets that itself, and ends)
            return
    await state.hold_contexts(generation.record)


async def _claimed_beside(task: asyncio.Task[None], claim: Claiming, times: StartTimes) -> int | None:
    """The claim made while `task` streams, once its first step has sent the runtime request: on
    two cores, a round trip sent before that request delays it. The job's take goes then too
    (`times.under_way`), after the claim: the first output's commit waits for the claim, and
    nothing for the take. A job cancelled meanwhile (its worker shutting down) cancels both: a
    claim made all the same leaves the response to the reaper, as a worker that died just after
    its claim would."""
    claiming = None
    try:
        await asyncio.sleep(0)  # (the task's first step runs now)
        claiming = asyncio.ensure_future(claim())
        times.under_way.set()  # (its waiter runs after the claim's first step)
        return await claiming
    except BaseException:
        if claiming is not None:
            claiming.cancel()
        task.cancel()
        await asyncio.wait({task})
        raise


async def _run_compaction(state: WorkerState, generation: Generation) -> None:
    """A compaction (app/service/compaction.py): the model's summary of the context, sealed into
    one compaction item; nothing is streamed, its client waits for the end."""
    record = generation.record
    task = asyncio.create_task(_summarize(state, generation))
    state.running[record.id] = task
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:  # the worker is shutting down: its client asks again
        task.cancel()
        shut_down = _failed("The worker shut down before this compaction ended.")
        await asyncio.shield(_finish(state, generation, [], shut_down))
        raise
    finally:
        state.running.pop(record.id, None)
    if task.cancelled():
        outcome = responses_db.Outcome("cancelled", [], time.time())
    elif isinstance(error := task.exception(), RuntimeFailure):
        outcome = responses_db.Outcome("failed", [], time.time(), error={"code": error.code, "message": str(error)})
    elif error is not None:
        log.error("compaction failed", exc_info=error)
        outcome = _failed(INTERNAL_ERROR)
    else:
        outcome = task.result()
    await _finish(state, generation, [], outcome)


async def _summarize(state: WorkerState, generation: Generation) -> responses_db.Outcome:
    record, model = generation.record, generation.model
    if model is None:
        raise RuntimeFailure(f"model '{record.model}' is not in this worker's catalog")
    item, usage = await compacting.summarize(state, record, model, generation.context)
    return responses_db.Outcome("completed", [item], time.time(), usage=usage)


NOT_CONTINUABLE = "The worker generating this response stopped, and the response could not be continued."


async def _hand_over(
    state: WorkerState, generation: Generation, task: asyncio.Task[None], translator: StreamTranslator
) -> None:
    """Leaves the generation to another worker, from the events committed so far, where it can be
    continued; else ends it `failed`, keeping its output."""
    record = generation.record
    await asyncio.wait({task})  # its stream closed: nothing more is handed to the writer
    model = generation.model
    if record.id not in state.transient and model is not None and model.continuation != "none":
        await state.writer.drain(record.id)
        if continuable(translator.output_now(), record.settings):
            async with state.engine.begin() as conn:
                number = await responses_db.release_for_continuation(
                    conn, record.id, state.settings.max_continuations, state.worker_id
                )
            if number is not None:
                queue_name = state.catalog.queue_for(record.model, state.settings.queue_name)
                with REDIS_LINK.tolerated("handing a generation over"):  # (else the requeue does, later)
                    await enqueue_generate(state.redis, record.id, queue_name, continuation=number)
                log.info("response %s: handed over to another worker (continuation %d)", record.id, number)
                return
    interrupted = _failed("The worker shut down before this response finished.", translator.partial_output())
    await _finish(state, generation, [], interrupted)


async def _finish(
    state: WorkerState, generation: Generation, closing: list[Event], outcome: responses_db.Outcome
) -> None:
    record, writer = generation.record, state.writer
    ended = not writer.refused(record.id) and await writer.finish(
        record.id, [*closing, terminal_event(outcome.applied_to(record))], outcome
    )
    if not ended and writer.refused(record.id):  # Postgres refused its events: it ends without them
        outcome = _failed("The response's output could not be stored.")
        ended = await writer.finish(record.id, [terminal_event(outcome.applied_to(record))], outcome)
    if not ended:
        log.info("response %s ended elsewhere first; its %s is discarded", record.id, outcome.status)
    else:
        output_tokens = (outcome.usage or {}).get("output_tokens")
        start_times.ended(record.id, record.model, outcome.status, output_tokens, generation.times)
        if record.background:  # its webhook deliveries, if any, were written with its end
            state.webhooks.nudge()
        FINISHED.labels(record.model, outcome.status).inc()
        if outcome.usage:
            INPUT_TOKENS.labels(record.model).inc(outcome.usage.get("input_tokens") or 0)
            cached = (outcome.usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
            CACHED_INPUT_TOKENS.labels(record.model).inc(cached)
            OUTPUT_TOKENS.labels(record.model).inc(outcome.usage.get("output_tokens") or 0)
            await _settle_tokens(state, record, outcome.usage)
    if record.settings.get("requested", {}).get("runs_mcp"):
        with REDIS_LINK.tolerated("forgetting a response's MCP credentials"):  # (else they expire)
            await mcp_credentials.forget(state.redis, record.id)
    if record.id in state.transient:
        state.transient.discard(record.id)
        # Kept while its last events wait for Redis: its follower waits for them. Else it expires.
        if not state.writer.holds(record.id):
            with REDIS_LINK.tolerated("ending a store=false response"):
                await transient_runs.ended(state.redis, record.id)


async def _settle_tokens(state: WorkerState, record: ResponseRecord, usage: dict[str, Any]) -> None:
    """The account's tokens this minute: the real count in place of the admission's estimate."""
    admitted = record.settings.get("admission")
    if admitted is None:
        return
    try:
        await rate_counters.settle(
            state.redis, admitted["tokens_key"], (usage.get("total_tokens") or 0) - admitted["estimate"]
        )
    except Exception:  # the estimate stays counted: the account is limited a little early, not late
        log.warning("response %s: could not settle its tokens", record.id, exc_info=True)


INTERNAL_ERROR = "internal error during generation"


def _failed(message: str, output: list[Item] | None = None) -> responses_db.Outcome:
    """A failure of ours (not the runtime's), with what output there is to keep."""
    error = {"code": "server_error", "message": message}
    return responses_db.Outcome("failed", output or [], time.time(), error=error)


async def _stream(state: WorkerState, generation: Generation, translator: StreamTranslator, prefix: str | None) -> None:
    record, model = generation.record, generation.model
    if model is None:
        raise RuntimeFailure(f"model '{record.model}' is not in this worker's catalog")
    if state.supervisor is not None:  # its model server may be restarting
        await state.supervisor.wait_healthy(state.supervisor.startup_timeout)
    response_id = record.id
    context = generation.context
    emit: Emit = partial(state.writer.append, response_id)
    if prefix is None:  # (a continuation's log holds its compaction, if it made one)
        context = await compacting.compacted_if_due(state, record, model, context, translator, emit)
    if not runs_tools(record.settings):
        await _answer(state, generation, translator, context, prefix)
        return
    async with ToolLoop(state, record, translator, emit) as loop:
        # This answer's output so far, which the model's next answer reads after the context (a
        # compaction of the context, made before the loop, is not: the context is compacted).
        own_output = len(translator.before) if prefix is None else 0
        await loop.prepare(context + translator.before)
        if translator.interrupted is not None:  # (a continuation's)
            await loop.finish_interrupted(translator.interrupted)
        await loop.make_approved_calls(context + translator.before)
        # A continuation's answers so far: one per call the model made, at least.
        loop.answers = sum(
            1
            for i in translator.before
            if (i["type"] == "mcp_call" and not i.get("approval_request_id"))
            or i["type"] in (*SEARCH_CALL_TYPES, "tool_search_call")
        )
        while True:
            await _answer(state, generation, translator, context + translator.before[own_output:], prefix, loop.answers)
            loop.answers += 1
            prefix = None
            if not loop.goes_on():
                return
            await loop.make_calls()
            if translator.asks_client():  # (an approval it waits for: the calls beside it are made)
                return
            if translator.steered:  # (the calls it asked for are made: the next answer is its successor's)
                translator.stopped_for = STEERED
                return
            if loop.answers >= state.settings.mcp_max_rounds:
                translator.stopped_for = MAX_TOOL_ROUNDS
                return
            translator.next_answer()


async def _answer(
    state: WorkerState,
    generation: Generation,
    translator: StreamTranslator,
    context: list[Item],
    prefix: str | None,
    earlier_answers: int = 0,
) -> None:
    """One inference request, its chunks translated into the log as they come."""
    record, model = generation.record, generation.model
    assert model is not None
    tools = translator.tools if translator.hosted_calls_left != 0 else translator.tools.without_hosted()
    body = chat_request(
        record, compaction.model_view(context, state.seal), model, tools, earlier_answers, translator.search_texts
    )
    if prefix is not None:
        body = continuing(body, prefix, model)
    first_token = TIME_TO_FIRST_TOKEN.labels(record.model)
    times = generation.times

    def translate(chunk: dict[str, Any]) -> None:
        try:
            events = translator.on_chunk(chunk)
        except AnswerSteered as steered:
            state.writer.append(record.id, steered.events)
            raise
        if events:
            state.writer.append(record.id, events)
            if times.first_token is None and any(event["type"] in OUTPUT_DELTAS for event in events):
                first_token.observe(times.first_token_now(record.model) - record.created_at)

    truncate = record.settings.get("truncation") == "auto"
    for repair in range(MAX_CALL_REPAIRS + 1):
        try:
            await state.runtime.stream(model, body, translate, truncate=truncate)
        except AnswerSteered:  # (its stream closed: the runtime stops generating)
            return
        if settled := translator.settle_client_calls():
            state.writer.append(record.id, settled)
        if not _to_repair(translator) or repair == MAX_CALL_REPAIRS or prefix is not None:
            return
        # Calls of client tools that made no typed item (a patch that is not V4A): the model is
        # told why and asked again, in the same request; the client never sees them.
        body = with_refusals(body, translator.answer_text(), translator.refused)
        state.writer.append(record.id, translator.close_answer())
        translator.next_answer()


MAX_CALL_REPAIRS = 2  # times an answer is asked again after its client tool calls were refused


def _to_repair(translator: StreamTranslator) -> bool:
    """Whether the answer is to be asked again: it made only calls that were refused."""
    return bool(translator.refused) and not (
        translator.asks_client() or translator.calls_to_make() or translator.steered
    )


def _ending(
    task: asyncio.Task[None], translator: StreamTranslator, generation: Generation, prefix: str
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
        usage=_with_earlier_runs(translator.usage_object(), generation, prefix),
        incomplete_details={"reason": reason} if reason else None,
    )


def _with_earlier_runs(usage: dict[str, Any], generation: Generation, prefix: str) -> dict[str, Any]:
    """A continued response's usage: its last run's, which read the answer so far as prompt, with
    the prompt of each earlier run counted again and the answer so far counted as output. No runtime
    reported the earlier runs: their prompts are taken as this run's less the answer so far, whose
    tokens are estimated as a quarter of its bytes (as OpenAI estimates them). A tool loop's
    rounds that ended before the continuation are counted as they were reported (`rounds_usage`,
    in `usage` already): a loop continued between two steps lost no generation to estimate."""
    earlier, counted = generation.continuations, generation.rounds_usage
    if not earlier or (counted is not None and not prefix):
        return usage
    already = len(prefix.encode()) // 4
    earlier_prompt = max(0, usage["input_tokens"] - (counted or {}).get("input_tokens", 0) - already)
    input_tokens = usage["input_tokens"] + earlier * earlier_prompt
    output_tokens = usage["output_tokens"] + already
    return {
        **usage,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }

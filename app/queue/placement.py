"""Cache-aware placement: a response that continues a context (a `previous_response_id` chain, a
conversation, a `prompt_cache_key`) goes to the worker whose engine ran that context last, where
the engine's prefix cache holds it; there its prompt costs only the prefill of what is new. A
response that continues nothing known goes to the least loaded worker, so that the contexts
start spread over the engines.

Each context is named by a key (`contexts_continued`, `contexts_held`). A worker starting a
response writes itself under the keys of the contexts the response holds (`remember`). Each
worker's load (jobs taken, not ended) is kept by the queue's take and removal scripts. The
enqueue (app/queue/arq_seam.py) looks the contexts and the loads up in the same script call that
stores the job, among the workers of the queue alive and not draining: the holder gets the job
while its load is within a slack of the least loaded's (1.25 times it, plus 2), else the least
loaded does (and the next turn sticks there). The job is stored as due `wait_ms` later, so that
only that worker, told on its own channel, takes it before then. A worker with no free slot hands
the job on at once; a worker gone or deaf leaves it to become due for every worker when the wait
ends. So placement delays no response by more than the wait, and never outlives its worker: the
job is the one job it always was, taken once.
"""

from __future__ import annotations

import hashlib

from redis.asyncio import Redis

from app.protocol.response_object import ResponseRecord
from app.queue.redis_keys import PLACEMENT_PREFIX, PLACEMENT_TTL_SECONDS


def contexts_continued(record: ResponseRecord) -> tuple[str, ...]:
    """The contexts whose engine the response's prompt starts from, most specific first."""
    continued = []
    if record.previous_response_id:
        continued.append(_response_context(record.previous_response_id))
    continued += _shared_contexts(record)
    return tuple(continued)


def contexts_held(record: ResponseRecord) -> tuple[str, ...]:
    """The contexts an engine holds once it has run the response: the response itself (the next
    turn of its chain), and the conversation and cache key it belongs to."""
    return (_response_context(record.id), *_shared_contexts(record))


async def remember(redis: Redis, worker_id: str, contexts: list[str]) -> None:
    """This worker's engine holds these contexts now."""
    async with redis.pipeline(transaction=False) as pipe:
        for context in contexts:
            pipe.set(PLACEMENT_PREFIX + context, worker_id, ex=PLACEMENT_TTL_SECONDS)
        await pipe.execute()


def _response_context(response_id: str) -> str:
    return f"response:{response_id}"


def _shared_contexts(record: ResponseRecord) -> list[str]:
    shared = []
    conversation = record.settings.get("conversation")
    if conversation:
        shared.append(f"conversation:{conversation['id']}")
    if key := record.settings.get("prompt_cache_key"):
        # Scoped by account: one account's key never steers another's responses.
        account_id = record.settings.get("requested", {}).get("account_id")
        shared.append("key:" + hashlib.sha256(f"{account_id}\0{key}".encode()).hexdigest()[:32])
    return shared

"""The token-count call: an API process asks a worker of the model to count a request's input
tokens (`POST /v1/responses/input_tokens`) with a `count_input_tokens` job, and waits for the
answer on a Redis key that only it reads; the worker that counted pushes the answer there."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any, cast

from arq.connections import ArqRedis
from redis.asyncio import Redis

from app.queue.arq_seam import JOB_PREFIX
from app.queue.redis_keys import COUNT_TOKENS_JOB, TOKEN_COUNT_PREFIX, TOKEN_COUNT_TTL_SECONDS, wake_channel


async def ask(
    queue: ArqRedis, queue_name: str, count_id: str, job: dict[str, Any], timeout: int
) -> dict[str, Any] | None:
    """The worker's answer (`{"input_tokens": n}` or `{"error": message}`), or None when no
    worker answered within `timeout` seconds (the job is then taken out of the queue)."""
    await queue.enqueue_job(COUNT_TOKENS_JOB, count_id, job, _job_id=count_id, _queue_name=queue_name)
    await queue.publish(wake_channel(queue_name), count_id)  # started at once, not at a poll
    waiting = queue.blpop([TOKEN_COUNT_PREFIX + count_id], timeout=timeout)
    answer = await cast(Awaitable[list[bytes] | None], waiting)
    if answer is None:  # nobody waits for it any more
        await queue.zrem(queue_name, count_id)
        await queue.delete(JOB_PREFIX + count_id)
        return None
    counted: dict[str, Any] = json.loads(answer[1])
    return counted


async def answer(redis: Redis, count_id: str, counted: dict[str, Any]) -> None:
    key = TOKEN_COUNT_PREFIX + count_id
    async with redis.pipeline(transaction=True) as pipe:
        pipe.lpush(key, json.dumps(counted))
        pipe.expire(key, TOKEN_COUNT_TTL_SECONDS)
        await pipe.execute()

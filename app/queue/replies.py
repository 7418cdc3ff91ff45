"""Calls from one process to a worker of a model, answered through Redis: the asking process
enqueues a job on the model's queue and waits on a Redis key that only it reads; the worker that
took the job pushes its answer there. `POST /v1/responses/input_tokens` counts this way
(`count_input_tokens`), and texts are embedded this way by a model only its worker reaches
(`embed_texts`)."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable
from typing import Any, cast

from arq.connections import ArqRedis
from redis.asyncio import Redis

from app.queue.arq_seam import JOB_PREFIX
from app.queue.redis_keys import REPLY_PREFIX, REPLY_TTL_SECONDS, wake_channel


async def ask(
    queue: ArqRedis, queue_name: str, job_name: str, reply_id: str, args: tuple[Any, ...], timeout: float
) -> dict[str, Any] | None:
    """The worker's answer, or None when no worker answered within `timeout` seconds (the job is
    then taken out of the queue)."""
    await queue.enqueue_job(job_name, reply_id, *args, _job_id=reply_id, _queue_name=queue_name)
    await queue.publish(wake_channel(queue_name), reply_id)  # started at once, not at a poll
    waiting = queue.blpop([REPLY_PREFIX + reply_id], timeout=math.ceil(timeout))
    answer = await cast(Awaitable[list[bytes] | None], waiting)
    if answer is None:  # nobody waits for it any more
        await queue.zrem(queue_name, reply_id)
        await queue.delete(JOB_PREFIX + reply_id)
        return None
    answered: dict[str, Any] = json.loads(answer[1])
    return answered


async def answer(redis: Redis, reply_id: str, answered: dict[str, Any]) -> None:
    key = REPLY_PREFIX + reply_id
    async with redis.pipeline(transaction=True) as pipe:
        pipe.lpush(key, json.dumps(answered))
        pipe.expire(key, REPLY_TTL_SECONDS)
        await pipe.execute()

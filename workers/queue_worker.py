"""arq's Worker, adapted to hundreds of long jobs and to token latency.

- arq keeps a job in the queue's sorted set until it finishes, and every poll re-checks every
  listed job with three Redis round trips: with hundreds of running generations that was most
  of a worker's CPU. Jobs this worker runs are skipped outright; jobs found running elsewhere
  are skipped for a second.
- arq only learns of a new job when it polls (on average half a poll interval late). The API
  publishes each new job's id, and the worker starts that job the moment it hears it (once its
  startup, which may wait for a model server, is done); polling stays as the safety net.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from arq.worker import Worker

from app.redis_keys import wake_channel

log = logging.getLogger(__name__)


class QueueWorker(Worker):
    ELSEWHERE_SECONDS = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._elsewhere: dict[bytes, float] = {}
        self._started = asyncio.Event()
        startup = self.on_startup

        async def on_startup(ctx: dict[str, Any]) -> None:
            if startup is not None:
                await startup(ctx)
            self._started.set()

        self.on_startup = on_startup

    async def main(self) -> None:
        listener = asyncio.create_task(self._listen_for_wakeups(), name="wake-listener")
        try:
            await super().main()
        finally:
            listener.cancel()

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        now = time.monotonic()
        fresh = [j for j in job_ids if j.decode() not in self.tasks and self._elsewhere.get(j, 0.0) < now]
        await super().start_jobs(fresh)
        if self.job_counter < self.max_jobs:  # every fresh id was examined: those not started run elsewhere
            self._elsewhere = {j: t for j, t in self._elsewhere.items() if t >= now}
            self._elsewhere.update({j: now + self.ELSEWHERE_SECONDS for j in fresh if j.decode() not in self.tasks})

    async def _listen_for_wakeups(self) -> None:
        await self._started.wait()
        while True:
            try:
                async with self.pool.pubsub() as pubsub:
                    await pubsub.subscribe(wake_channel(self.queue_name))
                    async for message in pubsub.listen():
                        if message["type"] == "message" and self.allow_pick_jobs and self.job_counter < self.max_jobs:
                            await self.start_jobs([message["data"]])  # the message names the job
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("wake-up listener lost Redis; polling only until it is back", exc_info=True)
                await asyncio.sleep(1.0)

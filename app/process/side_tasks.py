"""The long-running tasks of a process (listeners, keepers, flushers, periodic jobs), watched.

A side task that raises, or returns when it should run for ever, is logged and started again
after a pause: one that died silently would leave its work undone (an event writer whose flusher
died would leave every generation waiting on it until the job timeout). Closing cancels them
and waits for them to end. As procrastinate's worker watches its side tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from app.process.repeated_failure import RepeatedFailure

log = logging.getLogger(__name__)

RESTART_DELAY_SECONDS = 1.0

SideTask = Callable[[], Coroutine[Any, Any, None]]


class SideTasks:
    def __init__(self, restart_delay: float = RESTART_DELAY_SECONDS) -> None:
        self._restart_delay = restart_delay
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.restarts = 0  # how many times a side task had to be started again (for operators)

    def start(self, name: str, run: SideTask) -> None:
        if name in self._tasks:
            raise ValueError(f"side task {name!r} is already running")
        self._tasks[name] = asyncio.create_task(self._watch(name, run), name=name)

    def start_every(self, name: str, seconds: float, run_once: SideTask) -> None:
        """Runs `run_once` every `seconds`; the next run comes on time after one that failed. Runs that
        fail in a row (the database away) are logged when the first fails and when one succeeds."""

        failure = RepeatedFailure(f"{name} (every {seconds:g}s)", log)

        async def periodic() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    await run_once()
                except Exception:
                    failure.failed()
                else:
                    failure.succeeded()

        self.start(name, periodic)

    async def _watch(self, name: str, run: SideTask) -> None:
        while True:
            try:
                await run()
                log.error("side task %s returned; it is started again", name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("side task %s died; it is started again in %.1fs", name, self._restart_delay)
            self.restarts += 1
            await asyncio.sleep(self._restart_delay)

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

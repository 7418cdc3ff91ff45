"""The API process's uvicorn server, woken once a second when idle instead of ten times.

uvicorn's main loop sleeps a tenth of a second at a time to see whether a signal asked it to
exit, and refreshes the Date header every tenth time. This one sleeps a second at a time (the
header is refreshed as often as before) and a signal wakes it at once: on a virtual machine
being woken costs a process more CPU than most of what it then does (`wake_up_cost` and
`idle_wakeups_per_s` in bench/idle_benchmark.py). `--workers N` above 1 runs uvicorn's own
supervisor and servers as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

TICK_SECONDS = 1.0
_TICKS_OF_UVICORN = 10  # uvicorn counts its ticks in tenths of a second


class ApiServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_asked = asyncio.Event()
        ticks = 0
        should_exit = await self.on_tick(ticks)
        while not should_exit:
            ticks = (ticks + _TICKS_OF_UVICORN) % 864_000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):
                    await self._exit_asked.wait()
            should_exit = await self.on_tick(ticks)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_asked is not None:
            # A signal handler runs between two steps of the loop: hand the wake-up to the loop.
            self._loop.call_soon_threadsafe(self._exit_asked.set)


def serve(config: uvicorn.Config) -> None:
    """Runs the API as `uvicorn.run` would with this configuration."""
    if config.workers > 1:
        sock = config.bind_socket()
        Multiprocess(config, sockets=[sock]).run()
        return
    config.load_app()
    server = ApiServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)

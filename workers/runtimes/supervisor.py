"""A model server run by the worker as a supervised child: started, awaited until healthy,
restarted when it dies, stopped with the worker.

The child gets its own process group (vLLM forks engine processes; stopping the group stops
them all) and is told to exit should the worker itself be killed, so a kill -9 of a worker
never leaves a GPU held by an orphan. Generations in flight when the child dies lose their
connection and end `failed` through the ordinary runtime-failure path; new generations wait
for the restarted child.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from app.process.child_process import die_with_parent
from workers.runtime_failure import RuntimeFailure
from workers.runtimes.http_client import HttpClient, HttpError, RequestTimeouts

log = logging.getLogger(__name__)

_HEALTH_TIMEOUTS = RequestTimeouts(connect=5.0, read=5.0)  # one health check, while the server starts


class RuntimeSupervisor:
    RESTART_BACKOFF: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    STOP_GRACE_SECONDS = 15.0

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        base_url: str,
        startup_timeout: float,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.base_url = base_url
        self.startup_timeout = startup_timeout
        self.log_path = log_path
        self.env = env
        self.restarts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._healthy = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> bool:
        """The server answered its health check and has not died since."""
        return self._healthy.is_set()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        """Starts the child and returns once it answers; raises RuntimeFailure if it exits or
        stays silent past the startup timeout."""
        await self._launch()
        self._watcher = asyncio.create_task(self._watch(), name=f"supervise-{self.name}")

    async def wait_healthy(self, timeout: float) -> None:
        """Waits for a usable server (during a restart); raises RuntimeFailure after `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                await self._healthy.wait()
        except TimeoutError:
            raise RuntimeFailure(f"model server for {self.name!r} is not running (restarting)") from None

    async def shut_down(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        await self._terminate()

    async def _launch(self) -> None:
        log.info("starting model server for %s: %s", self.name, " ".join(self.command))
        output = open(self.log_path, "ab") if self.log_path else None
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,  # without a log file the child writes where the worker writes
                stderr=asyncio.subprocess.STDOUT if output else None,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env=self.env,
            )
        except OSError as exc:
            raise RuntimeFailure(f"could not start the model server for {self.name!r}: {exc}") from exc
        finally:
            if output is not None:
                output.close()
        try:
            await self._await_health(self._process)
        except BaseException:
            await self._terminate()
            raise
        self._healthy.set()
        log.info("model server for %s is up at %s (pid %d)", self.name, self.base_url, self._process.pid)

    async def _await_health(self, process: asyncio.subprocess.Process) -> None:
        deadline = asyncio.get_running_loop().time() + self.startup_timeout
        http = HttpClient()
        try:
            while True:
                if process.returncode is not None:
                    raise RuntimeFailure(
                        f"model server for {self.name!r} exited with {process.returncode} while starting"
                        + (f"; see {self.log_path}" if self.log_path else "")
                    )
                try:
                    async with http.request("GET", f"{self.base_url}/models", _HEALTH_TIMEOUTS) as answer:
                        if answer.status == 200:
                            return
                except (OSError, TimeoutError, HttpError):
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeFailure(f"model server for {self.name!r} not healthy after {self.startup_timeout} s")
                await asyncio.sleep(0.2)
        finally:
            await http.aclose()

    async def _watch(self) -> None:
        failures = 0
        while True:
            assert self._process is not None
            code = await self._process.wait()
            self._healthy.clear()
            self.restarts += 1
            delay = self.RESTART_BACKOFF[min(failures, len(self.RESTART_BACKOFF) - 1)]
            log.error("model server for %s exited with %s; restarting in %.0f s", self.name, code, delay)
            await asyncio.sleep(delay)
            try:
                await self._launch()
                failures = 0
            except RuntimeFailure:
                log.exception("model server for %s failed to restart", self.name)
                failures += 1

    async def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is not None:  # only what it forked may be left
            _signal_group(process.pid, signal.SIGKILL)
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(self.STOP_GRACE_SECONDS):
                await process.wait()
        except TimeoutError:
            log.warning("model server for %s ignored SIGTERM; killing it", self.name)
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()
        self._healthy.clear()


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass

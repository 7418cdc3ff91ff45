"""The model-server supervisor against a stand-in for `vllm serve` (a real HTTP server process):
start and health wait, a child that dies or never answers, crash and restart, clean stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.catalog import LlamaCppModel
from tests.conftest import ROOT, eventually, free_port
from workers.runtime_failure import RuntimeFailure
from workers.runtimes.launch import llamacpp_command
from workers.runtimes.supervisor import RuntimeSupervisor


def stand_in(port: int, *, prefix: str = "") -> list[str]:
    serve = f"{sys.executable} -m tests.stand_in_vllm serve m --host 127.0.0.1 --port {port} --served-model-name m"
    return ["sh", "-c", f"cd {ROOT} && {prefix}exec {serve}"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited; only its parent has yet to reap it
        return stat.read().split(") ", 1)[1][0] != "Z"


async def test_start_returns_once_the_server_answers_and_stop_ends_its_whole_process_group(tmp_path: Path) -> None:
    port = free_port()
    forked = tmp_path / "forked.pid"
    # The stand-in first forks a helper into its group, as vLLM forks its engine processes.
    supervisor = RuntimeSupervisor(
        "m", stand_in(port, prefix=f"sleep 300 & echo $! > {forked}; "), f"http://127.0.0.1:{port}/v1", 30
    )
    await supervisor.start()
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
        await supervisor.wait_healthy(0.01)
        helper = int(forked.read_text())
        assert alive(helper)
    finally:
        await supervisor.shut_down()
    assert supervisor.pid is not None and not alive(supervisor.pid)
    assert not alive(helper)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models")


async def test_a_server_that_exits_while_starting_is_reported_at_once(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    supervisor = RuntimeSupervisor("m", ["sh", "-c", "echo no GPU found >&2; exit 3"], "http://127.0.0.1:9/v1", 60, log)
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match=r"exited with 3 while starting; see .*server.log"):
        await supervisor.start()
    assert time.monotonic() - started < 5
    assert "no GPU found" in log.read_text()


async def test_a_server_that_never_answers_is_stopped_after_the_startup_timeout() -> None:
    supervisor = RuntimeSupervisor("m", ["sleep", "300"], f"http://127.0.0.1:{free_port()}/v1", 1.0)
    with pytest.raises(RuntimeFailure, match=r"not healthy after 1\.0 s"):
        await supervisor.start()
    assert supervisor.pid is not None and not alive(supervisor.pid)


async def test_a_server_that_dies_is_restarted_and_callers_wait_for_it(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    supervisor = RuntimeSupervisor("m", stand_in(port), f"http://127.0.0.1:{port}/v1", 30, log)
    supervisor.RESTART_BACKOFF = (0.5,)
    await supervisor.start()
    try:
        first = supervisor.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await eventually(lambda: supervisor.restarts == 1)  # it saw the death
        with pytest.raises(RuntimeFailure, match="restarting"):
            await supervisor.wait_healthy(0.1)
        await supervisor.wait_healthy(30)  # a generation waiting here starts once it is back
        assert supervisor.pid not in (None, first)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
    finally:
        await supervisor.shut_down()


async def test_the_real_llama_cpp_server_is_started_restarted_and_stopped() -> None:
    port = free_port()
    model = LlamaCppModel(id="local", runtime="llamacpp", context_window=512)
    supervisor = RuntimeSupervisor("local", llamacpp_command(model, port), f"http://127.0.0.1:{port}/v1", 60)
    supervisor.RESTART_BACKOFF = (0.1,)
    await supervisor.start()
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "local"
        first = supervisor.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await eventually(lambda: supervisor.restarts == 1)
        await supervisor.wait_healthy(60)
        assert supervisor.pid != first
    finally:
        await supervisor.shut_down()
    assert supervisor.pid is not None and not alive(supervisor.pid)


SUPERVISING_PROCESS = """
import asyncio, sys
from workers.runtimes.supervisor import RuntimeSupervisor

async def main():
    port = int(sys.argv[1])
    command = [sys.executable, "-m", "tests.stand_in_vllm", "serve", "m", "--host", "127.0.0.1",
               "--port", str(port), "--served-model-name", "m"]
    supervisor = RuntimeSupervisor("m", command, f"http://127.0.0.1:{port}/v1", 30)
    await supervisor.start()
    print(supervisor.pid, flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


async def test_a_killed_worker_takes_its_model_server_with_it() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", SUPERVISING_PROCESS, str(free_port())], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        child = int(await asyncio.to_thread(worker.stdout.readline))
        assert alive(child)
        worker.kill()  # SIGKILL: no cleanup code runs in the worker
        worker.wait(10)
        await eventually(lambda: not alive(child))  # no orphan keeps holding the GPU
    finally:
        worker.kill()

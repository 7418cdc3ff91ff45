"""The API's uvicorn server (app/process/api_server.py): woken once a second when idle, at once by
a signal to exit, and its Date header refreshed at every tick as uvicorn's own is."""

from __future__ import annotations

import asyncio
import signal

import pytest
import uvicorn
from starlette.applications import Starlette

from app.process import api_server
from tests.conftest import within


def server() -> api_server.ApiServer:
    config = uvicorn.Config(Starlette(), log_config=None)
    config.load()
    return api_server.ApiServer(config)


async def test_a_signal_to_exit_wakes_the_server_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_server, "TICK_SECONDS", 3600.0)  # no tick would come in the test's time
    running = server()
    main_loop = asyncio.create_task(running.main_loop())
    await asyncio.sleep(0.05)
    assert not main_loop.done()
    running.handle_exit(signal.SIGTERM, None)
    await within(main_loop, 5)


async def test_each_tick_refreshes_the_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_server, "TICK_SECONDS", 0.01)
    running = server()
    dates: list[bytes] = []
    refresh = running.on_tick

    async def on_tick(counter: int) -> bool:
        running.server_state.default_headers = []
        should_exit = await refresh(counter)
        dates.append(dict(running.server_state.default_headers)[b"date"])
        if len(dates) == 3:
            running.should_exit = True
        return should_exit

    monkeypatch.setattr(running, "on_tick", on_tick)
    main_loop = asyncio.create_task(running.main_loop())
    await within(main_loop, 5)
    assert len(dates) == 4 and all(date.endswith(b" GMT") for date in dates)

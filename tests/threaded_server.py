"""An ASGI app served by uvicorn on a loopback port in a thread of the test process, so that sync
and async tests alike can use it (the webhook receiver, the MCP test server)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class ThreadedServer:
    def __init__(self, app: Any, port: int, what: str, **config: Any) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._what = what

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {self._what} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

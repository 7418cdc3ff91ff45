"""A model runtime for the streaming benchmarks that costs the machine as little as it can: a
process of its own with a bare HTTP/1.1 server on uvloop, streaming Chat Completions chunks as
vLLM's server does, each due on a clock of its own (one timer a chunk, no task, no framework).

On a machine that the runtime shares with the system under test, the test fixture
(tests/fake_runtime.py, Starlette on uvicorn) takes twice this one's CPU (at 256 streams of a
token every 20 ms, 2.5 CPU-seconds a phase against 1.2: docs/benchmark.md). On a GPU host the
runtime's CPU is not the worker's, so the benchmarks can run this one instead
(`bench/stream_benchmark.py --light-runtime`). It answers only what they ask:

- `POST /v1/chat/completions` with `stream: true`: the answer the fake runtime's script gives
  (`#fake {json}`: `text`, `chunks` or `filler`; else an echo), paced by `delay` (chunk n due
  n · delay after the first) or `drift` (sleep `delay` after each chunk instead); `max_tokens`
  cuts it (finish_reason "length"); the last chunk carries the usage.
- `GET /v1/models`: one model, as a model server's health check is answered; any other
  request: `200 {}` (a readiness probe).

Keep-alive, as the worker's and the load generator's connection pools expect; a connection
closed mid-answer stops that answer.

    python bench/light_runtime.py PORT
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any, cast

import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# What a request asks for is read as the fake runtime reads it: the answer is the same.
from tests.fake_runtime import _chunks, _script

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _json(payload: object) -> bytes:
    data = orjson.dumps(payload)
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data)


_MODELS = _json({"object": "list", "data": [{"id": "fake-upstream", "object": "model"}]})
_EMPTY = _json({})


def _framed(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict[str, Any]) -> bytes:
    return _framed(b"data: " + orjson.dumps(payload) + b"\n\n")


class _Answer:
    """One streamed answer: its chunks written as they fall due."""

    def __init__(self, connection: _Connection, body: dict[str, Any]) -> None:
        self._connection = connection
        script = _script(body)
        chunks = _chunks(script)
        self._delay, self._drift = float(script.get("delay", 0.0)), bool(script.get("drift", False))
        limit = body.get("max_tokens")
        self._finish = "stop"
        if limit is not None and len(chunks) > limit:
            chunks, self._finish = chunks[:limit], "length"
        self._chunks = chunks
        self._prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        self._common = {"id": "chatcmpl-light", "object": "chat.completion.chunk", "created": int(time.time())}
        self._model = body.get("model", "")
        self._index = 0
        self._loop = asyncio.get_running_loop()
        self._start = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _event({**self._common, "model": self._model, "choices": [choice]})

    def start(self) -> None:
        self._connection.write(_HEAD + self._chunk({"role": "assistant", "content": ""}))
        self._next()

    def _next(self) -> None:
        if not self._index < len(self._chunks):
            self._end()
            return
        self._connection.write(self._chunk({"content": self._chunks[self._index]}))
        self._index += 1
        if self._index == len(self._chunks):
            self._end()
        elif self._drift:
            self._timer = self._loop.call_later(self._delay, self._next)
        else:
            self._timer = self._loop.call_at(self._start + self._index * self._delay, self._next)

    def _end(self) -> None:
        completion = len(self._chunks)
        usage = {
            "prompt_tokens": self._prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self._prompt_tokens + completion,
        }
        last = _event({**self._common, "model": self._model, "choices": [], "usage": usage})
        self._connection.write(self._chunk({}, self._finish) + last + _framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self._connection.answered()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self._buffer = b""
        self._answer: _Answer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._answer is None and (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            head = self._buffer[:end].decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
            length = int(fields.get("content-length", "0"))
            if len(self._buffer) < end + 4 + length:
                return
            body, self._buffer = self._buffer[end + 4 : end + 4 + length], self._buffer[end + 4 + length :]
            method, path, _ = head[0].split(" ", 2)
            if method == "POST" and path.endswith("/chat/completions"):
                self._answer = _Answer(self, orjson.loads(body))
                self._answer.start()
            else:
                self.write(_MODELS if path.endswith("/models") else _EMPTY)

    def write(self, data: bytes) -> None:
        self._transport.write(data)

    def answered(self) -> None:
        self._answer = None
        if self._buffer:  # a next request came while this one was answered
            self.data_received(b"")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._answer is not None:
            self._answer.stop()
            self._answer = None


async def _serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Connection, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(_serve(int(sys.argv[1])))

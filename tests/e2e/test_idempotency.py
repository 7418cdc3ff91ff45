"""Idempotency-Key through real processes: the OpenAI SDK whose connection is cut after its
request was sent retries and gets the one response; 50 identical creates at once generate once."""

from __future__ import annotations

import asyncio
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor

import openai

from tests.conftest import Environment, FakeRuntime, Server, free_port, wait_until


class CuttingProxy:
    """A TCP proxy to the API that, for its first `cuts` connections, lets the request through
    and closes the connection as the answer starts: the request was sent, its reply lost."""

    def __init__(self, upstream_port: int, cuts: int = 1) -> None:
        self.port = free_port()
        self.upstream_port = upstream_port
        self.cuts = cuts
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        starting = asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self._server = asyncio.run_coroutine_threadsafe(starting, self._loop).result(5)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _shut(self) -> None:
        self._server.close()
        pumping = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pumping:
            task.cancel()
        await asyncio.gather(*pumping, return_exceptions=True)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        cut, self.cuts = self.cuts > 0, self.cuts - 1

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, cutting: bool) -> None:
            try:
                while data := await source.read(65536):
                    if cutting:  # the answer is coming: drop it and the connection
                        client_writer.transport.abort()
                        upstream_writer.close()
                        return
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(client_reader, upstream_writer, False), pump(upstream_reader, client_writer, cut))


def test_a_create_whose_reply_was_lost_is_retried_by_the_sdk_and_runs_once(
    server: Server, api_key: str, fake: FakeRuntime, environment: Environment
) -> None:
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    key = secrets.token_hex(8)
    with CuttingProxy(port) as proxy:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=api_key, max_retries=2)
        response = client.responses.create(model="fake", input="hello", extra_headers={"Idempotency-Key": key})
        assert proxy.cuts < 0  # the first attempt's reply was cut, and the SDK asked again
    assert response.output_text == "Echo: hello"
    assert len(fake.requests()) == 1
    [row] = environment.query("SELECT resource_id FROM idempotency_keys WHERE key = $1", key)
    assert row["resource_id"] == response.id


def test_fifty_identical_creates_at_once_generate_once(server: Server, api_key: str, fake: FakeRuntime) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=60)
    key = {"Idempotency-Key": secrets.token_hex(8)}

    def create(_: int) -> str:
        return client.responses.create(model="fake", input="hello", background=True, extra_headers=key).id

    with ThreadPoolExecutor(50) as pool:
        ids = set(pool.map(create, range(50)))
    assert len(ids) == 1
    [response_id] = ids
    wait_until(lambda: client.responses.retrieve(response_id).status == "completed")
    assert len(fake.requests()) == 1

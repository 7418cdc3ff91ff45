"""Uploads over a real socket to an API process: a file past the limit is refused while it
streams (the server stops reading long before the client stops sending), a body that stalls is
refused after the idle limit, and neither leaves anything stored."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import Environment, api_client


@pytest.fixture(scope="module")
def limited(environment: Environment, api_key: str) -> Iterator[openai.OpenAI]:
    """An API process that takes files of 1 MB at most, and bodies that stall for 1 s at most."""
    limits = {"RESPONSES_FILE_MAX_BYTES": "1000000", "RESPONSES_UPLOAD_IDLE_SECONDS": "1"}
    with api_client(environment, api_key, **limits) as client:
        yield client


def _read_to_close(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (it does, after a refusal)."""
    connection.settimeout(15)
    answer = b""
    while chunk := connection.recv(65536):
        answer += chunk
    return answer


def _stored_files(environment: Environment) -> int:
    return int(environment.query("SELECT count(*) AS n FROM file_pieces")[0]["n"])


def test_an_upload_past_the_limit_is_refused_while_it_streams(
    limited: openai.OpenAI, api_key: str, environment: Environment
) -> None:
    sent = 0

    def body() -> Iterator[bytes]:  # 200 MB, sent in chunks, with no Content-Length
        nonlocal sent
        yield b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n'
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
        for _ in range(200 * 16):
            sent += 64 * 1024
            yield b"x" * (64 * 1024)
        yield b"\r\n--b--\r\n"

    before = _stored_files(environment)
    try:
        answer = httpx.post(
            f"{limited.base_url}files",
            content=body(),
            headers={"authorization": f"Bearer {api_key}", "content-type": "multipart/form-data; boundary=b"},
            timeout=30,
        )
        assert answer.status_code == 413 and answer.json()["error"]["param"] == "file"
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        pass  # the server answered and closed while the client was still sending: refused all the same
    assert sent < 50 * 1024 * 1024, f"the server read {sent:,} bytes of a refused upload"
    assert _stored_files(environment) == before


def test_an_upload_past_the_limit_that_says_so_is_refused_before_its_body(limited: openai.OpenAI, api_key: str) -> None:
    with socket.create_connection((limited.base_url.host, limited.base_url.port or 80)) as connection:
        connection.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + api_key.encode() + b"\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 2000000000\r\n\r\n"
        )
        answer = _read_to_close(connection)
    assert answer.startswith(b"HTTP/1.1 413") and b'"param":"file"' in answer


def test_a_body_that_stalls_is_refused_and_keeps_nothing(
    limited: openai.OpenAI, api_key: str, environment: Environment
) -> None:
    before = _stored_files(environment)
    with socket.create_connection((limited.base_url.host, limited.base_url.port or 80)) as connection:
        part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n' + b"x" * 2048
        connection.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + api_key.encode() + b"\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n" + part
        )
        started = time.monotonic()
        answer = _read_to_close(connection)
    assert answer.startswith(b"HTTP/1.1 400") and b"request_timeout" in answer
    assert 0.9 < time.monotonic() - started < 10
    assert _stored_files(environment) == before

"""A multipart/form-data body read as it streams: each part's headers, then its data in the
pieces they arrive in, so that an upload is stored as it comes and refused as soon as it is too
large (the whole body is never held, nor spooled to disk). A body that stalls longer than the
idle limit, or ends before its closing boundary, is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from app import errors
from app.protocol.file_upload import FormEvent, PartEnd, PartStart


def boundary_of(request: Request) -> bytes:
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise errors.UnsupportedMediaType(
            f"Unsupported Content-Type '{request.headers.get('content-type') or '(none)'}': "
            "send the file as multipart/form-data."
        )
    return options[b"boundary"]


async def form_events(request: Request, boundary: bytes, idle_seconds: float) -> AsyncIterator[FormEvent]:
    events: list[FormEvent] = []
    headers: dict[bytes, bytes] = {}
    field: list[bytes] = []
    value: list[bytes] = []
    ended = False

    def header_end() -> None:
        headers[b"".join(field).lower()] = b"".join(value)
        field.clear()
        value.clear()

    def headers_finished() -> None:
        _, options = parse_options_header(headers.get(b"content-disposition", b""))
        filename = options.get(b"filename")
        content_type = headers.get(b"content-type")
        events.append(
            PartStart(
                options.get(b"name", b"").decode("utf-8", "replace"),
                None if filename is None else filename.decode("utf-8", "replace"),
                None if content_type is None else content_type.decode("latin-1"),
            )
        )
        headers.clear()

    def end() -> None:
        nonlocal ended
        ended = True

    parser = MultipartParser(
        boundary,
        {
            "on_header_field": lambda data, start, stop: field.append(data[start:stop]),
            "on_header_value": lambda data, start, stop: value.append(data[start:stop]),
            "on_header_end": header_end,
            "on_headers_finished": headers_finished,
            "on_part_data": lambda data, start, stop: events.append(bytes(data[start:stop])),
            "on_part_end": lambda: events.append(PartEnd()),
            "on_end": end,
        },
    )
    chunks = request.stream().__aiter__()
    while True:
        try:
            async with asyncio.timeout(idle_seconds):
                chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except TimeoutError:
            stalled = errors.InvalidRequest(
                f"The request body stalled: nothing arrived for {idle_seconds:g} s.", code="request_timeout"
            )
            stalled.add_headers({"connection": "close"})  # (the rest of the body is not waited for)
            raise stalled from None
        try:
            parser.write(chunk)
        except MultipartParseError as exc:
            raise _malformed(str(exc)) from None
        for event in events:
            yield event
        events.clear()
    if not ended:
        raise _malformed("it ended before its closing boundary")


def _malformed(why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"The multipart/form-data body could not be read: {why}.", code="invalid_multipart")

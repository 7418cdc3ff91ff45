"""How the lines of a runtime's event stream are read: chunks, the end, and what a broken
server can send, which must fail the generation cleanly rather than crash the worker."""

from __future__ import annotations

import re
from typing import Any

import pytest

from workers.runtime_failure import RuntimeFailure
from workers.runtimes.client import EventStreamReader, _parse_line
from workers.translation.translate import StreamTranslator


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (b'data: {"choices": [{"delta": {"content": "h\\u00e9"}}]}', {"choices": [{"delta": {"content": "hé"}}]}),
        ('data: {"choices": [{"delta": {"content": "hé"}}]}'.encode(), {"choices": [{"delta": {"content": "hé"}}]}),
        (b"data:[DONE]", "done"),
        (b"data: [DONE] ", "done"),
        # Postgres cannot store NUL: a model's becomes U+FFFD, in text, tool calls and ids alike.
        (
            b'data: {"choices": [{"delta": {"content": "a\\u0000b", "tool_calls": [{"id": "c\\u0000"}]}}]}',
            {"choices": [{"delta": {"content": "a\ufffdb", "tool_calls": [{"id": "c\ufffd"}]}}]},
        ),
        (  # an escaped backslash before "u0000" is no NUL
            b'data: {"choices": [{"delta": {"content": "a\\\\u0000b"}}]}',
            {"choices": [{"delta": {"content": "a\\u0000b"}}]},
        ),
        (b": keep-alive", None),
        (b"event: message", None),
        (b"", None),
    ],
)  # fmt: skip
def test_chunks_and_the_end_are_read(line: bytes, parsed: object) -> None:
    assert _parse_line(line) == parsed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"data: {not json", "invalid JSON: '{not json'"),
        (b'data: {"content": "\xff\xfe"}', "invalid JSON"),  # not UTF-8
        (b"data: [1, 2]", "non-object chunk: '[1, 2]'"),
        (b'data: {"error": {"message": "out of memory"}}', "model runtime error: out of memory"),
        (b'data: {"error": "overloaded"}', "model runtime error: overloaded"),
        (b'data: {"error": "bad \\u0000 byte"}', "model runtime error: bad \ufffd byte"),
    ],
)  # fmt: skip
def test_what_a_broken_server_sends_fails_the_generation(line: bytes, message: str) -> None:
    with pytest.raises(RuntimeFailure, match=re.escape(message)):
        _parse_line(line)


@pytest.mark.parametrize(
    "chunk",
    [
        b'{"choices": "x"}',
        b'{"choices": [null]}',
        b'{"choices": [{"delta": {"tool_calls": "x"}}]}',
        b'{"choices": [{"delta": {"tool_calls": [null]}}]}',
    ],
)
def test_a_chunk_of_an_unexpected_shape_fails_the_generation_naming_the_runtime(chunk: bytes) -> None:
    translator = StreamTranslator()

    def translate(chunk: dict[str, Any]) -> None:
        translator.on_chunk(chunk)

    reader = EventStreamReader(translate)
    with pytest.raises(RuntimeFailure, match="model runtime sent a chunk of an unexpected shape"):
        reader.feed(b"data: " + chunk + b"\n\n")


def test_lines_split_anywhere_are_joined_and_nothing_after_done_is_taken() -> None:
    chunks: list[dict[str, object]] = []
    reader = EventStreamReader(chunks.append)
    stream = (
        b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
        b": keep-alive\n\n"
        b'data: {"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"choices": [{"delta": {"content": "after"}}]}\n\n'
    )
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]  # lines cut mid-way, even mid-UTF-8
    enough = [reader.feed(piece) for piece in pieces]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["a", "b"]
    assert reader.finished and reader.done
    # "Enough" from the piece that completes the [DONE] line on.
    first = enough.index(True)
    assert b"[DONE]\n" in b"".join(pieces[: first + 1]) and b"[DONE]\n" not in b"".join(pieces[:first])


def test_a_stream_whose_last_line_lacks_a_newline_still_gives_it() -> None:
    chunks: list[dict[str, object]] = []
    reader = EventStreamReader(chunks.append)
    assert not reader.feed(b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}')
    assert chunks == []
    reader.close()
    assert len(chunks) == 1 and reader.finished and not reader.done

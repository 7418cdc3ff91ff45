"""How the lines of a runtime's event stream are read: chunks, the end, and what a broken
server can send, which must fail the generation cleanly rather than crash the worker."""

from __future__ import annotations

import re

import pytest

from workers.runtime import _parse_line
from workers.runtime_errors import RuntimeFailure


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (b'data: {"choices": [{"delta": {"content": "h\\u00e9"}}]}', {"choices": [{"delta": {"content": "hé"}}]}),
        ('data: {"choices": [{"delta": {"content": "hé"}}]}'.encode(), {"choices": [{"delta": {"content": "hé"}}]}),
        (b"data:[DONE]", "done"),
        (b"data: [DONE] ", "done"),
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
    ],
)  # fmt: skip
def test_what_a_broken_server_sends_fails_the_generation(line: bytes, message: str) -> None:
    with pytest.raises(RuntimeFailure, match=re.escape(message)):
        _parse_line(line)

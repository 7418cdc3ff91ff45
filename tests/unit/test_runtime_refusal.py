"""How a model server's error answer becomes the failed response's error."""

from __future__ import annotations

import pytest

from workers.runtime_failure import refusal

CTX = "context_length_exceeded"


@pytest.mark.parametrize(
    ("status", "detail", "code", "retryable"),
    [
        (400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens", CTX, False),
        (400, '{"error": {"code": "context_length_exceeded", "message": "Requested tokens (431)"}}', CTX, False),
        (400, "input length exceeds the context length of the model", CTX, False),
        (400, "temperature must be at most 2", "server_error", False),
        (429, "too many requests", "server_error", True),
        (503, "overloaded", "server_error", True),
        (500, "maximum context length", "server_error", True),  # a crash is ours to retry, whatever it says
    ],
)  # fmt: skip
def test_refusals_are_coded_and_only_transient_ones_retried(
    status: int, detail: str, code: str, retryable: bool
) -> None:
    failure = refusal(status, detail)
    assert (failure.code, failure.retryable) == (code, retryable)
    assert str(status) in str(failure) and detail[:20] in str(failure)


def test_a_refusal_with_a_nul_character_can_be_stored() -> None:
    assert str(refusal(500, "bad \x00 byte")) == "model runtime answered 500: bad \ufffd byte"

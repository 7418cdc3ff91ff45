"""How a model server fails, as the worker sees it: the failure, whether asking again may help,
and the error code the failed response carries."""

from __future__ import annotations

import re


class RuntimeFailure(Exception):
    """The runtime refused, broke off or could not be reached; the message says which."""

    def __init__(self, message: str, retryable: bool = False, code: str = "server_error") -> None:
        super().__init__(message.replace("\x00", "\ufffd"))  # stored as the response's error: no NUL
        # Whether asking again may succeed: the server was unreachable, busy or broke off, as
        # opposed to refusing this request.
        self.retryable = retryable
        # The error code the failed response carries: context_length_exceeded when the input
        # cannot fit the model's context, else server_error.
        self.code = code


CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
# How servers word it when they do not say it with a code (vLLM, TGI, Ollama, llama.cpp).
_CONTEXT_WORDING = re.compile(
    r"context_length_exceeded|maximum context length|context window|context length|exceeds? .*context", re.I
)


def refusal(status: int, detail: str) -> RuntimeFailure:
    """The failure for an HTTP error answer of a model server."""
    code = CONTEXT_LENGTH_EXCEEDED if status == 400 and _CONTEXT_WORDING.search(detail) else "server_error"
    return RuntimeFailure(
        f"model runtime answered {status}: {detail}", retryable=status >= 500 or status == 429, code=code
    )

"""`POST /v1/embeddings` as OpenAI takes it: `input` a string or an array of strings (token
arrays refused: a model is chosen by name here, and its tokenizer is not the client's), `model`,
`encoding_format` (`float`, or `base64`: little-endian float32, which OpenAI's SDKs ask for by
default), `dimensions` (only the model's own), `user`."""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from app import errors
from app.protocol.validation import StrictModel, validate

MAX_INPUTS = 2048  # OpenAI's
MAX_INPUT_CHARS = 8192 * 8  # about 8,192 tokens, OpenAI's limit for one input
MAX_TOTAL_CHARS = 300_000 * 4  # about 300,000 tokens, OpenAI's limit for one request's inputs together


class _Request(StrictModel):
    input: str | list[Any]
    model: str = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    texts: list[str]
    model: str
    encoding_format: str
    dimensions: int | None


def parse(body: dict[str, Any]) -> EmbeddingsRequest:
    request = validate(_Request, body)
    texts = [request.input] if isinstance(request.input, str) else request.input
    if not texts or len(texts) > MAX_INPUTS:
        raise _invalid("input", f"expected a string or an array of 1 to {MAX_INPUTS} strings")
    for index, text in enumerate(texts):
        param = "input" if isinstance(request.input, str) else f"input[{index}]"
        if isinstance(text, int) or (isinstance(text, list) and all(isinstance(t, int) for t in text)):
            raise errors.UnsupportedParameter(param, "input as token ids")
        if not isinstance(text, str):
            raise _invalid(param, "expected a string")
        if not text:
            raise _invalid(param, "an input must not be empty")
        if len(text) > MAX_INPUT_CHARS:
            raise _invalid(param, f"an input holds at most {MAX_INPUT_CHARS} characters")
    if sum(len(text) for text in texts) > MAX_TOTAL_CHARS:
        raise _invalid("input", f"the inputs hold at most {MAX_TOTAL_CHARS:,} characters together")
    return EmbeddingsRequest(texts, request.model, request.encoding_format, request.dimensions)


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def _invalid(param: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"Invalid '{param}': {why}.", param=param, code="invalid_value")

"""Which prompts the worker must measure before generating, and what it does with the count."""

from __future__ import annotations

from typing import Any

import pytest

from workers.runtime_failure import RuntimeFailure
from workers.runtimes.prompt_length import TEMPLATE_ALLOWANCE, fit_to_context, surely_fits


def body(text: str, max_tokens: int = 100, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, **extra}


def test_a_prompt_far_from_the_end_of_the_context_needs_no_measuring() -> None:
    assert surely_fits(body("hello"), 4096)
    # 3000 bytes could be 3000 tokens: with 100 to generate and the template's share, 4096 may not hold it.
    assert not surely_fits(body("x" * 3000, max_tokens=1000), 4096)
    assert not surely_fits(body("hello", max_tokens=4096 - TEMPLATE_ALLOWANCE), 4096)


def test_tool_definitions_count_and_images_always_need_measuring() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 3000}}]
    assert not surely_fits(body("hi", tools=tools), 3300)
    image = [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]
    assert not surely_fits({"messages": [{"role": "user", "content": image}], "max_tokens": 10}, 100_000)


def test_max_tokens_is_cut_to_what_the_context_has_left() -> None:
    assert fit_to_context(body("x", max_tokens=500), prompt_tokens=3900, context_window=4096)["max_tokens"] == 196
    assert fit_to_context(body("x", max_tokens=50), prompt_tokens=100, context_window=4096)["max_tokens"] == 50
    with pytest.raises(RuntimeFailure) as caught:
        fit_to_context(body("x"), prompt_tokens=4096, context_window=4096)
    assert caught.value.code == "context_length_exceeded" and not caught.value.retryable

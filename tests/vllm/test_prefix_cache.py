"""Cached prompt tokens over real vLLM: the worker starts vLLM with --enable-prompt-tokens-details,
and each turn of a chain reports in `usage.input_tokens_details.cached_tokens` the prompt tokens
vLLM itself counted as prefix-cache hits for it (its `vllm:prefix_cache_hits` counter); a later
turn, whose prompt begins with the earlier one's, finds most of it cached."""

from __future__ import annotations

import secrets
from typing import Any

from tests.vllm.conftest import HOSTED, VllmStack

INSTRUCTIONS = " ".join(
    f"Rule {n}: answer briefly, politely and in plain English, without lists or headings." for n in range(40)
)


def test_each_turn_reports_the_cached_tokens_vllm_counted(vllm: VllmStack) -> None:
    def hits() -> float:
        return vllm.engine_metric("vllm:prefix_cache_hits_total")

    before = hits()
    first = vllm.client.responses.create(
        model=HOSTED, instructions=INSTRUCTIONS, input="Name a colour.", max_output_tokens=16
    )
    after_first = hits()
    assert first.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == after_first - before
    second = vllm.client.responses.create(
        model=HOSTED,
        instructions=INSTRUCTIONS,
        input="Name another.",
        previous_response_id=first.id,
        max_output_tokens=16,
    )
    assert second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached == hits() - after_first
    assert cached >= first.usage.input_tokens * 0.8  # (the earlier turn's prompt, in whole blocks)
    assert cached < second.usage.input_tokens


def test_tools_a_search_loads_leave_the_prompt_before_them_cached(vllm: VllmStack) -> None:
    """vLLM's parser reads a call of any tool, so loaded tools are described in the tool search's
    output (catalog `loaded_tools = "in_context"`): the tools the template renders at the prompt's
    start stay as they were, and the whole earlier prompt is found in the cache. Listed with the
    others, they would change the prompt's start and leave only the system text before them cached."""
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    tools: Any = [
        {"type": "function", "name": "lookup", "description": "Looks a word up.", "parameters": {"type": "object"}},
        {**weather, "defer_loading": True},
        {"type": "tool_search", "execution": "client"},
    ]
    question: Any = {"role": "user", "content": f"{INSTRUCTIONS} Session {secrets.token_hex(4)}: the weather in Paris?"}
    first = vllm.client.responses.create(model=HOSTED, tools=tools, input=[question], max_output_tokens=16)
    loaded: Any = [
        question,
        {"type": "tool_search_call", "call_id": "c1", "execution": "client", "arguments": {"paths": ["get_weather"]}},
        {"type": "tool_search_output", "call_id": "c1", "execution": "client", "tools": [weather]},
    ]
    second = vllm.client.responses.create(model=HOSTED, tools=tools, input=loaded, max_output_tokens=16)
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= 0.8 * first.usage.input_tokens

"""Cached prompt tokens over real vLLM: the worker starts vLLM with --enable-prompt-tokens-details,
and each turn of a chain reports in `usage.input_tokens_details.cached_tokens` the prompt tokens
vLLM itself counted as prefix-cache hits for it (its `vllm:prefix_cache_hits` counter); a later
turn, whose prompt begins with the earlier one's, finds most of it cached."""

from __future__ import annotations

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

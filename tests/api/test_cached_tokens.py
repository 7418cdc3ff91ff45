"""Cached prompt tokens as the model's server reports them (vLLM's
`prompt_tokens_details.cached_tokens`, with --enable-prompt-tokens-details): in the usage of a
JSON answer, a stream, a background response, a tool loop's rounds summed, and counted by model in
`/metrics`."""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from tests.api.conftest import InProcess


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def cached_counted(server: InProcess) -> float:
    found = re.search(r'^responses_cached_input_tokens_total\{model="fake-model"\} ([0-9.e+]+)$',
                      server.http.get("/metrics").text, re.MULTILINE)  # fmt: skip
    return float(found.group(1)) if found else 0.0


def test_cached_tokens_reach_the_usage_of_every_kind_of_answer(client: openai.OpenAI, server: InProcess) -> None:
    before = cached_counted(server)
    answer = client.responses.create(model="fake", input=script(text="Hi.", cached_tokens=32))
    assert answer.usage is not None and answer.usage.input_tokens_details.cached_tokens == 32
    with client.responses.stream(model="fake", input=script(text="Hi.", cached_tokens=16)) as stream:
        streamed = stream.get_final_response()
    assert streamed.usage is not None and streamed.usage.input_tokens_details.cached_tokens == 16
    background = client.responses.create(model="fake", input=script(text="Hi.", cached_tokens=48), background=True)
    while background.status in ("queued", "in_progress"):
        background = client.responses.retrieve(background.id)
    assert background.usage is not None and background.usage.input_tokens_details.cached_tokens == 48
    assert cached_counted(server) - before == 32 + 16 + 48


def test_a_tool_loops_rounds_add_up_their_cached_tokens(web_client: openai.OpenAI) -> None:
    search = {"name": "web_search", "arguments": json.dumps({"query": "tea"})}
    looped = web_client.responses.create(
        model="fake",
        input=script(tool_calls=[search], cached_tokens=10, then={"text": "Tea.", "cached_tokens": 64}),
        tools=[{"type": "web_search"}],
    )
    assert looped.usage is not None and looped.usage.input_tokens_details.cached_tokens == 10 + 64

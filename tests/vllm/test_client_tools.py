"""The tools that are not functions, over real vLLM (SmolLM2, its calls held to the function's
schema by vLLM for a named tool choice): a web search the server makes against the SearXNG
stand-in, a shell call that comes back typed and whose output the engine reads, and an
apply_patch call that reaches the client only as well-formed file operations."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tests.searxng_stand_in import SearxngStandIn
from tests.vllm.conftest import EXTERNAL, VllmStack


def test_a_web_search_over_real_vllm_is_made_by_the_server_and_the_engine_reads_it(
    vllm: VllmStack, searxng: SearxngStandIn
) -> None:
    asked = len(searxng.queries)
    tool: Any = {"type": "web_search", "search_context_size": "low"}
    choice: Any = {"type": "web_search"}
    answer = vllm.client.responses.create(
        model=EXTERNAL,
        input="Search the web: what is the capital of Portugal?",
        tools=[tool],
        tool_choice=choice,
        include=["web_search_call.action.sources"],
        max_output_tokens=60,
    )
    assert answer.status in ("completed", "incomplete"), answer.error
    [call] = [item for item in answer.output if item.type == "web_search_call"]
    assert call.status == "completed" and call.action.type == "search" and call.action.query
    assert searxng.queries[asked:] == [call.action.query]
    assert len(call.action.sources or []) == 3
    first, then = vllm.proxied()[-2:]
    [function] = [t["function"] for t in first["tools"] if t["function"]["name"] == "web_search"]
    assert function["strict"] is True
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    [told] = [m for m in then["messages"] if m["role"] == "tool"]
    assert f"Passage 0 about {call.action.query}" in told["content"]
    assert answer.output[-1].type == "message"


def test_a_shell_call_over_real_vllm_comes_back_typed_and_its_output_reaches_the_engine(vllm: VllmStack) -> None:
    shell: Any = {"type": "shell", "environment": {"type": "local"}}
    choice: Any = {"type": "shell"}
    called = vllm.client.responses.create(
        model=EXTERNAL, input="List the files in this folder.", tools=[shell], tool_choice=choice, max_output_tokens=200
    )
    assert called.status in ("completed", "incomplete"), called.error
    calls = [item for item in called.output if item.type == "shell_call"]
    assert calls, [item.type for item in called.output]  # (held to the strict schema: a whole call)
    call = calls[0]
    assert call.action.commands and all(c.strip() for c in call.action.commands)
    printed = [
        {"stdout": "notes.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
        for _ in call.action.commands
    ]
    output: Any = {"type": "shell_call_output", "call_id": call.call_id, "output": printed}
    answer = vllm.client.responses.create(
        model=EXTERNAL, input=[output], previous_response_id=called.id, tools=[shell], max_output_tokens=40
    )
    assert answer.status in ("completed", "incomplete"), answer.error
    *_, asked, told = vllm.proxied()[-1]["messages"]
    assert json.loads(asked["tool_calls"][0]["function"]["arguments"])["commands"] == call.action.commands
    assert told["role"] == "tool" and told["content"].startswith(f"$ {call.action.commands[0]}\nnotes.txt")


def test_an_apply_patch_call_over_real_vllm_reaches_the_client_only_well_formed(vllm: VllmStack) -> None:
    choice: Any = {"type": "apply_patch"}
    answer = vllm.client.responses.create(
        model=EXTERNAL,
        input="Create a file hello.txt that says hello.",
        tools=[{"type": "apply_patch"}],
        tool_choice=choice,
        max_output_tokens=200,
    )
    assert answer.status in ("completed", "incomplete"), answer.error
    calls = [item for item in answer.output if item.type == "apply_patch_call"]
    for call in calls:  # whatever the model wrote: a file's operation, or nothing the client sees
        operation = call.operation.model_dump()
        assert operation["type"] in ("create_file", "update_file", "delete_file")
        assert operation["path"] and not operation["path"].startswith("/")
    requests = vllm.proxied()
    assert 1 <= len(requests) <= 3  # asked again at most twice
    for refused, again in itertools.pairwise(requests):
        told = again["messages"][-1]
        assert told["role"] == "tool" and told["content"].startswith("The patch was not applied")
        assert refused["tool_choice"] == again["tool_choice"]
    if not calls:  # every answer was refused: the response ends with a message, never a bad call
        assert len(requests) == 3 and [item.type for item in answer.output] == ["message"]

"""The tools and parameters no deployment of open models can stand in for are clear 400s naming
them, with why, whatever RESPONSES_HOSTED_TOOLS says (the plain server ignores hosted tools it
does not run: these are not among them), and nothing is stored."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import Environment, rows_written_since, write_mark


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ({"type": "code_interpreter", "container": {"type": "auto"}}, "sandboxed containers"),
        ({"type": "image_generation"}, "image models"),
        ({"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"}, "screen"),
        ({"type": "computer"}, "screen"),
        ({"type": "programmatic_tool_calling"}, "V8 sandbox"),
    ],
)
def test_a_tool_only_openai_can_run_is_a_400_saying_why(
    client: openai.OpenAI, environment: Environment, tool: dict[str, Any], why: str
) -> None:
    mark = write_mark(environment)
    with pytest.raises(openai.BadRequestError) as refused:
        tools: Any = [{"type": "function", "name": "f"}, tool]
        client.responses.create(model="fake", input="hi", tools=tools)
    body = refused.value.body
    assert (body["param"], body["code"]) == ("tools[1].type", "unsupported_parameter")
    assert why in body["message"]
    assert rows_written_since(environment, mark)[:2] == (0, 0)


def test_a_prompt_is_a_400_saying_why(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="hi", prompt={"id": "pmpt_1"})
    assert refused.value.body["param"] == "prompt" and "dashboard" in refused.value.body["message"]

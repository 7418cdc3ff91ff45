"""The client's typed tools on an open model: `shell`, `local_shell` and `apply_patch` offered as
functions, the model's calls coming back as `shell_call`, `local_shell_call` and one
`apply_patch_call` per file operation of its V4A patch (with the shell events streamed), the
client's typed outputs reaching the model, a malformed call sent back to the model and never to
the client, and bad input refused naming it."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import Environment, FakeRuntime, rows_written_since, write_mark


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def calling(name: str, arguments: dict[str, Any], then: dict[str, Any] | None = None) -> str:
    return script(tool_calls=[{"name": name, "arguments": json.dumps(arguments)}], then=then or {"text": "Done."})


SHELL: Any = {"type": "shell", "environment": {"type": "local"}}
APPLY_PATCH: Any = {"type": "apply_patch"}
LOCAL_SHELL: Any = {"type": "local_shell"}
PATCH = """*** Begin Patch
*** Add File: hello.py
+print("hello")
*** Update File: app.py
@@ def main():
-    print("hi")
+    print("hello")
*** Delete File: old.txt
*** End Patch"""


def test_a_shell_call_comes_back_typed_and_its_output_reaches_the_model(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    arguments = {"commands": ["ls -l", "pwd"], "timeout_ms": 5000}
    response = client.responses.create(model="fake", input=calling("shell", arguments), tools=[SHELL])
    [call] = response.output
    assert call.type == "shell_call" and call.id.startswith("sh_") and call.status == "completed"
    assert call.action.commands == ["ls -l", "pwd"] and call.action.timeout_ms == 5000
    assert call.environment is not None and call.environment.type == "local"
    offered = fake.requests()[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["shell"]
    output: Any = {
        "type": "shell_call_output",
        "call_id": call.call_id,
        "output": [
            {"stdout": "total 0\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
        ],
        "max_output_length": 4096,
    }
    follow = client.responses.create(model="fake", input=[output], previous_response_id=response.id, tools=[SHELL])
    assert follow.output_text == "Done."
    *_, asked, told = fake.requests()[-1]["messages"]
    assert asked["tool_calls"][0]["function"]["name"] == "shell"
    assert json.loads(asked["tool_calls"][0]["function"]["arguments"])["commands"] == ["ls -l", "pwd"]
    assert told == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": "$ ls -l\ntotal 0\n\n(exit 0)\n$ pwd\n\n(timed out)",
    }
    listed = client.responses.input_items.list(follow.id).data
    assert listed[0].type == "shell_call_output" and listed[0].id.startswith("sho_")


def test_a_shell_call_streams_its_commands(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model="fake", input=calling("shell", {"commands": ["make", "make test"]}), tools=[SHELL]
    ) as stream:
        events = list(stream)
    kinds = [e.type for e in events if e.type.startswith(("response.output_item", "response.shell_call"))]
    commands = [
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
    ]
    assert kinds == ["response.output_item.added", *commands, *commands, "response.output_item.done"]
    done = [e for e in events if e.type == "response.shell_call_command.done"]
    assert [(e.command_index, e.command) for e in done] == [(0, "make"), (1, "make test")]


def test_a_call_left_unanswered_or_an_output_of_no_call_is_a_400_naming_it(
    client: openai.OpenAI, environment: Environment
) -> None:
    response = client.responses.create(model="fake", input=calling("shell", {"commands": ["ls"]}), tools=[SHELL])
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="go on", previous_response_id=response.id, tools=[SHELL])
    assert response.output[0].call_id in refused.value.body["message"]
    printed = [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    answer: Any = {"type": "shell_call_output", "call_id": response.output[0].call_id, "output": printed}
    strays: list[Any] = [
        {"type": "shell_call_output", "call_id": "call_typo", "output": printed},
        {"type": "function_call_output", "call_id": "call_typo", "output": "x"},
    ]
    for stray in strays:
        mark = write_mark(environment)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="fake",
                input=[answer, stray],
                previous_response_id=response.id,
                tools=[SHELL],
            )
        assert refused.value.body["param"] == "input[1].call_id" and "call_typo" in refused.value.body["message"]
        assert rows_written_since(environment, mark)[:2] == (0, 0)


def test_a_patch_becomes_one_call_per_file_and_each_output_reaches_the_model(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response = client.responses.create(
        model="fake", input=calling("apply_patch", {"input": PATCH}), tools=[APPLY_PATCH]
    )
    calls = response.output
    assert [c.type for c in calls] == ["apply_patch_call"] * 3
    assert [c.operation.model_dump(exclude_none=True) for c in calls] == [
        {"type": "create_file", "path": "hello.py", "diff": '+print("hello")\n'},
        {"type": "update_file", "path": "app.py", "diff": '@@ def main():\n-    print("hi")\n+    print("hello")\n'},
        {"type": "delete_file", "path": "old.txt"},
    ]
    first = calls[0].call_id
    assert [c.call_id for c in calls] == [first, f"{first}_2", f"{first}_3"]
    outputs: Any = [
        {"type": "apply_patch_call_output", "call_id": calls[0].call_id, "status": "completed"},
        {"type": "apply_patch_call_output", "call_id": calls[1].call_id, "status": "failed", "output": "no app.py"},
    ]
    with pytest.raises(openai.BadRequestError) as refused:  # the third is not answered
        client.responses.create(model="fake", input=outputs, previous_response_id=response.id, tools=[APPLY_PATCH])
    assert calls[2].call_id in refused.value.body["message"]
    third: Any = {"type": "apply_patch_call_output", "call_id": calls[2].call_id, "status": "completed"}
    client.responses.create(
        model="fake", input=[*outputs, third], previous_response_id=response.id, tools=[APPLY_PATCH]
    )
    messages = fake.requests()[-1]["messages"]
    asked = next(m for m in messages if m.get("tool_calls"))
    patches = [json.loads(c["function"]["arguments"])["input"] for c in asked["tool_calls"]]
    assert patches[0] == '*** Begin Patch\n*** Add File: hello.py\n+print("hello")\n*** End Patch'
    assert patches[2] == "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch"
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["Applied", "Failed: no app.py", "Applied"]


def test_a_malformed_patch_goes_back_to_the_model_never_to_the_client(client: openai.OpenAI, fake: FakeRuntime) -> None:
    good = {"tool_calls": [{"name": "apply_patch", "arguments": json.dumps({"input": PATCH})}]}
    bad = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n*** End Patch"
    with client.responses.stream(
        model="fake", input=calling("apply_patch", {"input": bad}, then=good), tools=[APPLY_PATCH]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["apply_patch_call"] * 3
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["apply_patch_call"] * 3  # nothing of the refused call
    _, second = fake.requests()
    told = second["messages"][-1]
    assert told["role"] == "tool" and "'*** Move to:' is not supported" in told["content"]
    assert second["messages"][-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"input": bad})
    assert final.usage is not None and final.usage.input_tokens > 0


def test_a_model_that_keeps_writing_malformed_calls_is_asked_at_most_twice_more(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    again: dict[str, Any] = {"tool_calls": [{"name": "shell", "arguments": json.dumps({"commands": []})}]}
    response = client.responses.create(
        model="fake",
        input=script(tool_calls=again["tool_calls"], then={**again, "then": {**again, "then": again}}),
        tools=[SHELL],
    )
    assert len(fake.requests()) == 3
    assert response.status == "completed" and [i.type for i in response.output] == ["message"]
    assert "needs 'commands'" in fake.requests()[-1]["messages"][-1]["content"]


def test_a_local_shell_call_and_its_output_by_id(client: openai.OpenAI, fake: FakeRuntime) -> None:
    arguments = {"command": ["ls", "-la"], "workdir": "/tmp"}
    response = client.responses.create(model="fake", input=calling("local_shell", arguments), tools=[LOCAL_SHELL])
    [call] = response.output
    assert call.type == "local_shell_call" and call.status == "completed"
    assert call.action.model_dump(exclude_none=True) == {
        "type": "exec",
        "command": ["ls", "-la"],
        "env": {},
        "working_directory": "/tmp",
    }
    output: Any = {"type": "local_shell_call_output", "id": call.call_id, "output": "a\nb\n"}
    client.responses.create(model="fake", input=[output], previous_response_id=response.id, tools=[LOCAL_SHELL])
    assert fake.requests()[-1]["messages"][-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "a\nb\n"}


def test_tool_choice_names_a_typed_tool(client: openai.OpenAI, fake: FakeRuntime) -> None:
    choice: Any = {"type": "apply_patch"}
    client.responses.create(
        model="fake", input=calling("apply_patch", {"input": PATCH}), tools=[SHELL, APPLY_PATCH], tool_choice=choice
    )
    assert fake.requests()[0]["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "shell", "environment": {"type": "container_auto"}}], "tools[0].environment"),
        ([{"type": "shell", "environment": {"type": "local", "extra": 1}}], "tools[0].environment.extra"),
        ([SHELL, SHELL], "tools[1]"),
        ([{"type": "apply_patch", "name": "x"}], "tools[0].name"),
    ],
)
def test_a_malformed_tool_is_a_400_naming_it(client: openai.OpenAI, tools: list[Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="hi", tools=tools)
    assert refused.value.body["param"] == param


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "shell_call_output", "call_id": "c", "output": [{"stdout": "x"}]}, "input[0].output[0].outcome"),
        ({"type": "apply_patch_call_output", "call_id": "c", "status": "maybe"}, "input[0].status"),
        ({"type": "local_shell_call_output", "output": "x"}, "input[0].call_id"),
        ({"type": "apply_patch_call", "call_id": "c", "operation": {"type": "rename"}}, "input[0].operation"),
    ],
)
def test_a_malformed_typed_item_is_a_400_naming_it(client: openai.OpenAI, item: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input=[item], tools=[SHELL])  # type: ignore[list-item]
    assert refused.value.body["param"].startswith(param)


def test_a_conversation_carries_a_shell_call_and_its_output_to_the_next_turn(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    conversation = client.conversations.create()
    called = client.responses.create(
        model="fake", input=calling("shell", {"commands": ["date"]}), tools=[SHELL], conversation=conversation.id
    )
    [call] = called.output
    output: Any = {
        "type": "shell_call_output",
        "call_id": call.call_id,
        "output": [{"stdout": "Sat Dec  5\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    }
    client.responses.create(model="fake", input=[output], tools=[SHELL], conversation=conversation.id)
    *_, asked, told = fake.requests()[-1]["messages"]
    assert asked["tool_calls"][0]["id"] == call.call_id and told["content"] == "$ date\nSat Dec  5\n\n(exit 0)"
    types = [item.type for item in client.conversations.items.list(conversation.id, order="asc").data]
    assert types == ["message", "shell_call", "shell_call_output", "message"]

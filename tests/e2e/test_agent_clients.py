"""Agent clients' real requests, sent as they are (tests/fixtures/clients: Codex CLI's), and the
request fields they rely on: namespace and custom tools, hosted tools, client_metadata, reasoning
sent back, tool-call limits, extra sampling parameters."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import CustomToolParam, FunctionToolParam

from tests.conftest import (
    Environment,
    FakeRuntime,
    Server,
    api_client,
    free_port,
    start_logged,
    stop,
    wait_for_http,
)

CLIENTS = Path(__file__).resolve().parent.parent / "fixtures" / "clients"


def codex_body(name: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CLIENTS / f"codex-exec-{name}-request.json").read_text())
    return {**body, **changes}


def with_last_user_text(body: dict[str, Any], text: str) -> dict[str, Any]:
    """The body with its last user message saying `text` (a script for the fake runtime)."""
    index = max(i for i, item in enumerate(body["input"]) if item.get("role") == "user")
    items = list(body["input"])
    items[index] = {**items[index], "content": [{"type": "input_text", "text": text}]}
    return {**body, "input": items}


def stream_events(server: Server, key: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POSTs the body as raw JSON and reads its SSE stream to the end; each event's data."""
    events = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.stream("POST", f"{server.base_url}/responses", content=json.dumps(body), headers=headers) as answer:
        assert answer.status_code == 200, answer.read().decode()
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def hosted_tools_not_offered(server: Server, kind: str) -> float:
    """The API's count of hosted tools of this type echoed but not offered to the model."""
    text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics").text
    line = f'responses_hosted_tools_not_offered_total{{type="{kind}"}} '
    return sum(float(row[len(line) :]) for row in text.splitlines() if row.startswith(line))


def test_codex_first_request_is_served_as_sent(server: Server, api_key: str, fake: FakeRuntime) -> None:
    counted = hosted_tools_not_offered(server, "web_search")
    events = stream_events(server, api_key, codex_body("first", model="fake"))
    types = [event["type"] for event in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["store"] is False
    assert "client_metadata" not in final
    assert final["tools"][-1] == {"type": "web_search", "external_web_access": False}  # echoed, not offered
    assert hosted_tools_not_offered(server, "web_search") == counted + 1
    [sent] = fake.requests()
    offered = [tool["function"]["name"] for tool in sent["tools"]]
    assert "web_search" not in offered and "client_metadata" not in json.dumps(sent)
    assert {"multi_agent_v1__spawn_agent", "multi_agent_v1__close_agent", "exec_command"} <= set(offered)
    # Codex's ids on its input items are its own: the model sees the messages, not the ids.
    assert sent["messages"][0]["role"] == "system" and "You are a coding agent" in sent["messages"][0]["content"]


def test_a_namespace_call_comes_back_with_its_namespace(server: Server, api_key: str, fake: FakeRuntime) -> None:
    call = {"name": "multi_agent_v1__close_agent", "arguments": '{"target": "agent-1"}'}
    body = with_last_user_text(codex_body("first", model="fake"), script(tool_calls=[call]))
    events = stream_events(server, api_key, body)
    [item] = events[-1]["response"]["output"]
    assert item["type"] == "function_call" and item["id"].startswith("fc_")
    assert (item["name"], item["namespace"], item["arguments"]) == ("close_agent", "multi_agent_v1", call["arguments"])
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "close_agent"


def test_a_replayed_namespace_call_reaches_the_model_under_its_runtime_name(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    namespace = codex_body("first")["tools"][4]
    assert namespace["type"] == "namespace"
    client.responses.create(
        model="fake",
        tools=[namespace],
        input=[
            {"role": "user", "content": "close it"},
            {
                "type": "function_call",
                "call_id": "call_9",
                "name": "close_agent",
                "namespace": "multi_agent_v1",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_9", "output": "closed"},
        ],
    )
    messages = fake.requests()[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__close_agent"
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_9", "content": "closed"}


def test_codex_second_request_sends_its_reasoning_back_to_the_model(
    server: Server, api_key: str, fake: FakeRuntime
) -> None:
    events = stream_events(server, api_key, codex_body("second", model="thinking-model"))
    assert events[-1]["type"] == "response.completed"
    [sent] = fake.requests()
    *_, call_message, tool_message = sent["messages"]
    assert call_message["reasoning_content"] == "Let me think about it."
    assert call_message["tool_calls"][0]["function"] == {
        "name": "exec_command",
        "arguments": '{"cmd": "echo hello-from-fake"}',
    }
    assert tool_message["role"] == "tool" and "hello-from-fake" in tool_message["content"]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}  # effort "high"


APPLY_PATCH: CustomToolParam = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "text"},
}
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hello "world"\n*** End Patch'


def test_a_custom_tool_call_comes_back_with_its_free_text_input(client: openai.OpenAI, fake: FakeRuntime) -> None:
    arguments = json.dumps({"input": PATCH})
    with client.responses.stream(
        model="fake", input=script(tool_calls=[{"name": "apply_patch", "arguments": arguments}]), tools=[APPLY_PATCH]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    [call] = final.output
    assert call.type == "custom_tool_call" and call.id.startswith("ctc_")
    assert (call.name, call.input, call.call_id) == ("apply_patch", PATCH, "call_0")
    [delta] = [e for e in events if e.type == "response.custom_tool_call_input.delta"]
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert delta.delta == done.input == PATCH
    [sent] = fake.requests()
    assert sent["tools"][0]["function"]["parameters"]["required"] == ["input"]


def test_a_custom_tools_output_goes_back_to_the_model(client: openai.OpenAI, fake: FakeRuntime) -> None:
    arguments = json.dumps({"input": PATCH})
    first = client.responses.create(
        model="fake", input=script(tool_calls=[{"name": "apply_patch", "arguments": arguments}]), tools=[APPLY_PATCH]
    )
    call_id = str(first.output[0].call_id)
    with pytest.raises(openai.BadRequestError):  # its call must be answered first
        client.responses.create(model="fake", previous_response_id=first.id, input="go on", tools=[APPLY_PATCH])
    second = client.responses.create(
        model="fake",
        previous_response_id=first.id,
        input=[{"type": "custom_tool_call_output", "call_id": call_id, "output": "Done!"}],
        tools=[APPLY_PATCH],
    )
    assert second.status == "completed"
    *_, call_message, tool_message = fake.requests()[-1]["messages"]
    assert call_message["tool_calls"][0]["function"] == {"name": "apply_patch", "arguments": arguments}
    assert tool_message == {"role": "tool", "tool_call_id": call_id, "content": "Done!"}
    items = list(client.responses.input_items.list(second.id, order="asc"))
    assert [i.type for i in items][-2:] == ["custom_tool_call", "custom_tool_call_output"]
    assert items[-1].id.startswith("ctco_")


PATCH_GRAMMAR = 'start: "*** Begin Patch" /(.|\\n)+/'
GRAMMAR_PATCH: CustomToolParam = {
    **APPLY_PATCH,
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}


def test_a_custom_tool_with_a_grammar_takes_the_answer_held_to_it_as_its_input(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    with client.responses.stream(
        model="grammar-model",
        input=script(chunks=["*** Begin Patch", "\n*** Add File: a.txt", "\n*** End Patch"]),
        tools=[GRAMMAR_PATCH],
        tool_choice={"type": "custom", "name": "apply_patch"},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    [call] = final.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert call.input == "*** Begin Patch\n*** Add File: a.txt\n*** End Patch"
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == call.input and len(deltas) >= 1
    assert final.tools[0].format.definition == PATCH_GRAMMAR  # echoed as sent
    [sent] = fake.requests()
    assert sent["structured_outputs"] == {"grammar": PATCH_GRAMMAR}
    assert "tools" not in sent  # the answer is the input: no function to call


@pytest.mark.parametrize(
    ("model", "tool_choice", "tools", "param", "reason"),
    [
        ("fake", {"type": "custom", "name": "apply_patch"}, [GRAMMAR_PATCH], "tools[0].format", "cannot hold"),
        ("grammar-model", "auto", [GRAMMAR_PATCH], "tools[0].format", "tool_choice must name this tool"),
        (
            "grammar-model",
            "auto",
            [{"type": "namespace", "name": "ns", "description": "d", "tools": [GRAMMAR_PATCH]}],
            "tools[0].tools[0].format",
            "namespace",
        ),
    ],
)
def test_a_grammar_the_model_cannot_hold_to_is_refused_naming_it(
    client: openai.OpenAI, fake: FakeRuntime, model: str, tool_choice: Any, tools: list[Any], param: str, reason: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="x", tools=tools, tool_choice=tool_choice)
    assert caught.value.body["param"] == param and reason in caught.value.body["message"]
    assert fake.requests() == []


TWO_CALLS = script(
    tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}, {"name": "get_weather", "arguments": "{}"}]
)
WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {}},
    "strict": None,
}


def test_one_call_at_most_when_asked_whatever_the_runtime_sends(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=TWO_CALLS, tools=[WEATHER], parallel_tool_calls=False)
    [call] = response.output
    assert call.arguments == '{"city": "Paris"}'


def test_max_tool_calls_leaves_function_calls_alone(client: openai.OpenAI, fake: FakeRuntime) -> None:
    """It counts the calls of hosted tools only, as OpenAI documents (tests/e2e/test_mcp_tools.py)."""
    response = client.responses.create(model="fake", input=TWO_CALLS, tools=[WEATHER], max_tool_calls=1)
    assert [item.type for item in response.output] == ["function_call", "function_call"]


def test_hosted_tools_are_refused_when_the_deployment_says_so(
    environment: Environment, api_key: str, fake: FakeRuntime
) -> None:
    with api_client(environment, api_key, RESPONSES_HOSTED_TOOLS="refuse") as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="fake", input="x", tools=[WEATHER, {"type": "web_search"}])
        assert (caught.value.body["param"], caught.value.body["code"]) == ("tools[1].type", "unsupported_parameter")
    assert fake.requests() == []


def test_client_metadata_is_kept_from_the_model_and_limited(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x", extra_body={"client_metadata": {"thread_id": "t-1"}})
    assert "client_metadata" not in response.model_dump() and "t-1" not in json.dumps(fake.requests())
    for bad in ({"k": 1}, {"k" * 65: "v"}, {"k": "v" * 4097}, {str(n): "v" for n in range(17)}, "thread"):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="fake", input="x", extra_body={"client_metadata": bad})
        assert caught.value.body["param"].startswith("client_metadata")


def test_vllm_sampling_parameters_reach_the_runtime(client: openai.OpenAI, fake: FakeRuntime) -> None:
    sampling = {
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "seed": 7,
        "stop": ["END"],
        "presence_penalty": 0.5,
    }
    response = client.responses.create(model="fake", input="x", extra_body=sampling)
    [sent] = fake.requests()
    assert {name: sent[name] for name in sampling} == sampling
    assert response.to_dict()["presence_penalty"] == 0.5


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_k": -2}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"seed": "7"}, "seed"),
        ({"stop": []}, "stop"),
        ({"logit_bias": {"word": 1}}, "logit_bias"),
        ({"top_kk": 1}, "top_kk"),
    ],
)
def test_bad_sampling_parameters_are_refused_naming_them(
    client: openai.OpenAI, fake: FakeRuntime, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="x", extra_body=extra)
    assert caught.value.body["param"] == param
    assert fake.requests() == []


@pytest.mark.parametrize(("asked", "created", "done"), [(None, "auto", "default"), ("flex", "flex", "flex")])
def test_service_tier_is_echoed_as_openai_does(
    client: openai.OpenAI, fake: FakeRuntime, asked: Any, created: str, done: str
) -> None:
    extra = {} if asked is None else {"service_tier": asked}
    with client.responses.stream(model="fake", input="x", **extra) as stream:
        first = next(iter(stream))
        final = stream.get_final_response()
    assert first.type == "response.created" and first.response.service_tier == created
    assert final.service_tier == done


CODEX_MISSING = "the codex CLI is not installed (npm install -g @openai/codex)"


def codex_exec(base_url: str, api_key: str, tmp_path: Path, prompt: str, **provider: str) -> str:
    """Runs `codex exec` with the server as its model provider (`provider`: more of its settings,
    as TOML values); its output once it succeeded."""
    home, project = tmp_path / "codex-home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    settings = "".join(f"{name} = {value}\n" for name, value in provider.items())
    (home / "config.toml").write_text(f"""
model = "thinking-model"
model_provider = "responses-server"
model_reasoning_effort = "high"

[model_providers.responses-server]
name = "responses-server"
base_url = "{base_url}"
env_key = "RESPONSES_SERVER_KEY"
wire_api = "responses"
{settings}""")
    done = subprocess.run(
        [
            "codex",
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-C",
            str(project),
            prompt,
        ],
        env={**os.environ, "CODEX_HOME": str(home), "RESPONSES_SERVER_KEY": api_key},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


CODEX_CALL = {"name": "exec_command", "arguments": json.dumps({"cmd": "echo hello-from-fake"})}
CODEX_PROMPT = script(
    reasoning="I should run the command.",
    tool_calls=[CODEX_CALL],
    then={"text": "The command printed hello-from-fake."},
)


@pytest.mark.skipif(shutil.which("codex") is None, reason=CODEX_MISSING)
def test_codex_exec_runs_a_tool_call_to_its_final_answer_with_its_reasoning_sealed(
    server: Server, api_key: str, fake: FakeRuntime, tmp_path: Path
) -> None:
    output = codex_exec(server.base_url, api_key, tmp_path, CODEX_PROMPT)
    assert "The command printed hello-from-fake." in output
    first, second = fake.requests()
    assert first["tools"] and "client_metadata" not in json.dumps(first)
    *_, call_message, tool_result = second["messages"]
    assert tool_result["role"] == "tool" and "hello-from-fake" in tool_result["content"]
    # Codex (store: false) sent its reasoning back sealed; the model saw it again.
    assert call_message["reasoning_content"] == "I should run the command."


@pytest.mark.skipif(shutil.which("codex") is None, reason=CODEX_MISSING)
def test_codex_with_websockets_runs_its_task_over_the_socket_without_falling_back_to_https(
    environment: Environment, server: Server, api_key: str, fake: FakeRuntime, tmp_path: Path
) -> None:
    """(`server`: its worker serves this API's queue too.)"""
    port, log_path = free_port(), tmp_path / "api.log"
    api = start_logged(environment, log_path, "api", "--port", str(port))
    try:
        wait_for_http(f"http://127.0.0.1:{port}/ready", api)
        output = codex_exec(f"http://127.0.0.1:{port}/v1", api_key, tmp_path, CODEX_PROMPT, supports_websockets="true")
    finally:
        stop(api)
    assert "The command printed hello-from-fake." in output
    *_, tool_result = fake.requests()[-1]["messages"]
    assert tool_result["role"] == "tool" and "hello-from-fake" in tool_result["content"]
    log = log_path.read_text()
    assert '"WebSocket /v1/responses" [accepted]' in log
    assert "POST /v1/responses" not in log  # no fallback to HTTPS

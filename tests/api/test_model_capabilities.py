"""What the catalog says a model can take decides what a request may ask for and what reaches
the model: reasoning effort, images (structured output and tools have their own files)."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
import pytest

from app.protocol.images import data_url
from tests.conftest import FakeRuntime
from tests.fake_runtime import IMAGE_TOKENS, THINKING_OFF_TOKENS, png

CAT = data_url(png(3, 2), "image/png")
DOT = data_url(png(), "image/png")


def image(url: str = CAT, **extra: Any) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url, **extra}


def test_reasoning_effort_turns_the_models_thinking_on_and_off(client: openai.OpenAI, fake: FakeRuntime) -> None:
    high = client.responses.create(model="thinking-model", input="x", reasoning={"effort": "high"})
    client.responses.create(model="thinking-model", input="x", reasoning={"effort": "none"})
    client.responses.create(model="graded-model", input="x", reasoning={"effort": "medium"})
    sent = fake.requests()
    assert sent[0]["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent[1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent[2]["reasoning_effort"] == "medium" and "chat_template_kwargs" not in sent[2]
    assert high.reasoning.effort == "high"


@pytest.mark.parametrize(
    ("model", "effort"),
    [("fake", "low"), ("thinking-model", "medium"), ("graded-model", "none")],
)
def test_an_effort_the_model_does_not_take_is_a_400(
    client: openai.OpenAI, fake: FakeRuntime, model: str, effort: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input="x", reasoning=cast(Any, {"effort": effort}))
    assert (caught.value.body["param"], caught.value.body["code"]) == ("reasoning.effort", "unsupported_value")
    assert fake.requests() == []


def test_effort_none_on_a_model_that_does_not_reason_is_accepted(client: openai.OpenAI, fake: FakeRuntime) -> None:
    client.responses.create(model="fake", input="x", reasoning={"effort": "none"})
    assert "chat_template_kwargs" not in fake.requests()[0]


def test_images_reach_the_model_as_image_url_parts(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(
        model="thinking-model",
        input=cast(
            Any, [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"}, image(detail="high")]}]
        ),
    )
    assert response.status == "completed"
    [message] = fake.requests()[0]["messages"]
    assert message["content"][1] == {"type": "image_url", "image_url": {"url": CAT, "detail": "high"}}
    [item] = client.responses.input_items.list(response.id)
    assert item.content[1].type == "input_image" and item.content[1].image_url == CAT


@pytest.mark.parametrize(
    ("model", "images", "param", "code"),
    [
        ("thinking-model", [image(), image(DOT), image()], "input", "too_many_images"),
        ("fake", [image()], "input", "too_many_images"),  # a text-only model takes none
        ("thinking-model", [{"type": "input_image", "file_id": "file_1"}], "input[0].content[0].file_id", None),
        ("thinking-model", [{"type": "input_image"}], "input[0].content[0].image_url", "missing_required_parameter"),
        ("thinking-model", [image("ftp://x/cat.png")], "input[0].content[0].image_url", "invalid_value"),
    ],
)
def test_images_a_model_cannot_take_are_a_400(
    client: openai.OpenAI,
    fake: FakeRuntime,
    model: str,
    images: list[dict[str, Any]],
    param: str,
    code: str | None,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input=cast(Any, [{"role": "user", "content": images}]))
    assert caught.value.body["param"] == param
    assert caught.value.body["code"] == (code or "unsupported_parameter")
    assert fake.requests() == []


def test_logprobs_are_asked_of_the_runtime_and_returned_as_openai_shapes_them(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    with client.responses.stream(
        model="fake", input="#fake " + '{"text": "one two"}', include=["message.output_text.logprobs"], top_logprobs=2
    ) as stream:
        deltas = [e for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    [sent] = fake.requests()
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    # Deltas waiting for the same commit are one delta: each carries its own tokens' logprobs.
    assert "".join(d.delta for d in deltas) == "one two"
    delta_logprobs = [lp for d in deltas for lp in d.logprobs]
    assert [(lp.token, lp.logprob) for lp in delta_logprobs] == [("one", 0.0), (" two", -0.1)]
    assert [t.token for t in delta_logprobs[1].top_logprobs or []] == [" two", "alt0"]
    part = final.output[0].content[0]
    assert [(lp.token, lp.bytes, lp.logprob) for lp in part.logprobs] == [
        ("one", list(b"one"), 0.0),
        (" two", list(b" two"), -0.1),
    ]
    assert [t.token for t in part.logprobs[1].top_logprobs] == [" two", "alt0"] and final.top_logprobs == 2
    assert client.responses.retrieve(final.id).output[0].content[0].logprobs == part.logprobs


def test_without_asking_no_logprobs_are_asked_for(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="x")
    assert "logprobs" not in fake.requests()[0] and response.output[0].content[0].logprobs == []


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"include": ["message.output_text.logprobs"]}, "include"), ({"top_logprobs": 3}, "top_logprobs")],
)
def test_logprobs_of_a_model_that_cannot_give_them_are_a_400(
    client: openai.OpenAI, fake: FakeRuntime, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="smollm2", input="x", **extra)
    assert (caught.value.body["param"], caught.value.body["code"]) == (param, "unsupported_value")
    assert fake.requests() == []


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "name": "lookup"}])
def test_a_vllm_model_without_a_tool_parser_is_offered_no_tools(client: openai.OpenAI, choice: Any) -> None:
    # vLLM 0.32 answers every tool_choice but "none" with a 400 without --tool-call-parser.
    lookup: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="capped", input="x", tools=[lookup], tool_choice=choice)
    assert (caught.value.body["param"], caught.value.body["code"]) == ("tool_choice", "unsupported_value")


WEATHER: Any = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("effort", ["none", "high"])
def test_a_prompt_is_counted_as_the_runtime_counts_it_with_tools_images_and_reasoning(
    client: openai.OpenAI, fake: FakeRuntime, effort: Any
) -> None:
    """`input_tokens` asks the runtime's /tokenize with all its chat template renders (the tools,
    the thinking switch): the same count the runtime reports for the answer's prompt."""
    content = [{"type": "input_text", "text": "What is in this picture?"}, image()]
    request: Any = {
        "model": "counted-model",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": content}],
        "tools": [WEATHER],
        "reasoning": {"effort": effort},
    }
    counted = client.responses.input_tokens.count(**request).input_tokens
    answered = client.responses.create(**request)
    assert answered.usage is not None and counted == answered.usage.input_tokens
    text_only = client.responses.input_tokens.count(
        model="counted-model", instructions="Be brief.", input="What is in this picture?", reasoning={"effort": "high"}
    ).input_tokens
    # The image, the thinking switch and the tools each counted: what a count without them lacks.
    thinking_off = THINKING_OFF_TOKENS if effort == "none" else 0
    tool_words = len(json.dumps(fake.requests()[0]["tools"]).split())
    assert counted == text_only + IMAGE_TOKENS + thinking_off + tool_words

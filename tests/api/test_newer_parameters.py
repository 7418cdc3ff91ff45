"""The parameters newer SDKs send (docs/api.md, "Parameters"): each accepted as documented, echoed
where OpenAI's Response echoes it, or refused naming it; and a model retrieved by its id."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import FakeRuntime


def test_accepted_parameters_are_echoed_and_change_nothing_sent(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(
        model="fake",
        input="hello",
        access_programs={"cyber": "standard"},
        image={"context_compression": "disabled"},
        prompt_cache_options={"mode": "explicit", "ttl": "12h"},
        background_options={"completion_window": "soonest", "continuation_id": "batch-7"},
    )
    assert response.output_text == "Echo: hello"
    assert response.access_programs is not None and response.access_programs.cyber == "standard"
    assert response.image is not None and response.image.context_compression == "disabled"
    assert response.prompt_cache_options is not None and response.prompt_cache_options.ttl == "12h"
    assert client.responses.retrieve(response.id).prompt_cache_options == response.prompt_cache_options
    [sent] = fake.requests()
    assert not {"access_programs", "image", "prompt_cache_options", "background_options"} & set(sent)


def test_a_background_completion_window_needs_a_background_response(client: openai.OpenAI) -> None:
    options: Any = {"completion_window": "2h"}
    queued = client.responses.create(model="fake", input="later", background=True, background_options=options)
    assert queued.status in ("queued", "in_progress", "completed")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="now", background_options=options)
    assert refused.value.body["param"] == "background_options.completion_window"


def test_top_level_verbosity_is_text_verbosity(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model="fake", input="hello", verbosity="low")
    assert parsed.text is not None and parsed.text.verbosity == "low"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="x", text={"verbosity": "high"}, extra_body={"verbosity": "low"})
    assert refused.value.body["param"] == "verbosity"


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"access_programs": {"cyber": "daybreak_red"}}, "access_programs.cyber", "invalid_value"),
        ({"image": {"context_compression": "enabled"}}, "image.context_compression", "invalid_value"),
        ({"prompt_cache_options": {"prewarm": True}}, "prompt_cache_options.prewarm", "invalid_value"),
        ({"prompt_cache_options": {"ttl": "forever"}}, "prompt_cache_options.ttl", "invalid_value"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation", "unsupported_parameter"),
        ({"tools": [{"type": "programmatic_tool_calling"}]}, "tools[0].type", "unsupported_parameter"),
    ],
)
def test_refused_parameters_name_themselves(
    client: openai.OpenAI, fake: FakeRuntime, fields: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.post("/responses", body={"model": "fake", "input": "x", **fields}, cast_to=object)
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert fake.requests() == []


def test_compact_takes_the_safety_identifier_and_image_options(client: openai.OpenAI) -> None:
    compacted = client.responses.compact(
        model="fake", input="a long story", safety_identifier="user-42", image={"context_compression": "auto"}
    )
    assert [item.type for item in compacted.output][-1] == "compaction"


def test_a_model_is_retrieved_by_its_id_or_alias(client: openai.OpenAI) -> None:
    listed = [model.id for model in client.models.list()]
    for model_id in listed:
        assert client.models.retrieve(model_id).id == model_id
    assert client.models.retrieve("fake").id == "fake-model"  # an alias, as `model` takes
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["code"] == "model_not_found"
    assert missing.value.body["param"] == "model"

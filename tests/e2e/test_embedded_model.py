"""The embedded CPU model (SmolLM2-135M-Instruct under llama.cpp's server, started by a worker
that hosts it) end to end through the openai SDK. Its texts differ slightly between llama.cpp
builds, so these tests check structure and short facts, never long exact texts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from openai.types.responses import FunctionToolParam

from app.ops.local_stack import WELCOME_QUESTION
from tests.conftest import Environment, Server, start_worker, stop


@pytest.fixture(scope="module")
def embedded(environment: Environment, server: Server, api_key: str) -> Iterator[openai.OpenAI]:
    worker = start_worker(environment, "--model", "smollm2")
    client = openai.OpenAI(base_url=server.base_url, api_key=api_key, max_retries=0, timeout=120)
    try:
        # Foreground requests wait in the model's queue until the worker's llama.cpp server is up.
        client.responses.create(model="smollm2", input="Hi", max_output_tokens=16)
        yield client
    finally:
        stop(worker, grace=30)


def test_a_chat_answers_sensibly_with_usage_counted_by_the_server(embedded: openai.OpenAI) -> None:
    response = embedded.responses.create(
        model="smollm2",
        input="What is the capital city of France? Answer with one word.",
        temperature=0,
        max_output_tokens=40,
    )
    assert response.status in ("completed", "incomplete")
    assert "paris" in response.output_text.lower()
    usage = response.usage
    assert usage is not None
    # llama.cpp sends no usage when streaming; the worker asks it for the templated prompt's length.
    assert usage.input_tokens > 12  # the question's tokens and the chat template's
    assert 0 < usage.output_tokens <= 40
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_question_dev_prints_is_answered_well_with_the_catalogs_sampling(
    embedded: openai.OpenAI, seed: int
) -> None:
    response = embedded.responses.create(
        model="smollm2", input=WELCOME_QUESTION, max_output_tokens=40, extra_body={"seed": seed}
    )
    assert (response.temperature, response.top_p) == (0.2, 0.9)  # sampled as the catalog says
    assert "paris" in response.output_text.lower()


def test_a_stream_adds_up_to_the_stored_answer(embedded: openai.OpenAI) -> None:
    with embedded.responses.stream(
        model="smollm2", input="Count from one to five.", temperature=0, max_output_tokens=30
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert embedded.responses.retrieve(final.id).output_text == deltas


def test_concurrent_responses_all_complete(embedded: openai.OpenAI) -> None:
    # llama.cpp's server generates one answer at a time; the others wait their turn, none is dropped.
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda n: embedded.responses.create(model="smollm2", input=f"Count to {n}.", max_output_tokens=16),
                range(3, 7),
            )
        )
    assert all(a.status in ("completed", "incomplete") and a.output_text for a in answers)


def test_a_json_schema_answer_is_valid_json_of_that_schema(embedded: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    response = embedded.responses.create(
        model="smollm2",
        instructions="Answer in JSON.",
        input="Name a famous city and its country.",
        # Not strict: maxLength (which keeps a small model's answer short) is outside OpenAI's strict
        # subset. llama.cpp enforces the schema it is given either way.
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": False}},
        temperature=0,
        max_output_tokens=100,
    )
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), schema)  # llama.cpp's grammar held it to the schema


def test_a_forced_tool_call_names_the_function_with_valid_arguments(embedded: openai.OpenAI) -> None:
    parameters: dict[str, object] = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    tool: FunctionToolParam = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": parameters,
        "strict": True,
    }
    response = embedded.responses.create(
        model="smollm2",
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=64,
    )
    assert response.status == "completed"
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    call_id = str(call.call_id)
    jsonschema.validate(json.loads(call.arguments), parameters)
    # The tool's result goes back to the model in the same chain.
    answer = embedded.responses.create(
        model="smollm2",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "Sunny, 21 degrees."}],
        max_output_tokens=40,
    )
    assert answer.status in ("completed", "incomplete") and answer.output_text


def test_input_beyond_the_context_window_is_refused_not_truncated(embedded: openai.OpenAI) -> None:
    # llama.cpp's server ends such a stream empty; its refusal comes with the prompt-length probe.
    with pytest.raises(openai.BadRequestError) as caught:
        embedded.responses.create(model="smollm2", input="lighthouse " * 2500, max_output_tokens=16)
    assert caught.value.body["code"] == "context_length_exceeded" and caught.value.body["param"] == "input"


def test_truncation_auto_drops_the_oldest_turns_to_fit_the_context(embedded: openai.OpenAI) -> None:
    # Four long notes (about 900 tokens each, as SmolLM2 counts them) outgrow its 2,048-token
    # context: each turn goes on without the oldest turns it cannot hold, measured by llama.cpp.
    previous = None
    for note in range(4):
        turn = embedded.responses.create(
            model="smollm2",
            input=f"Note {note}: " + "lighthouse keeper " * 300,
            previous_response_id=previous,
            max_output_tokens=16,
            truncation="auto",
        )
        assert turn.status in ("completed", "incomplete") and turn.truncation == "auto"
        previous = turn.id
    final = embedded.responses.create(
        model="smollm2", input="Say OK.", previous_response_id=previous, max_output_tokens=16, truncation="auto"
    )
    assert final.status in ("completed", "incomplete") and final.output_text
    assert final.usage is not None and final.usage.input_tokens + 16 <= 2048
    assert len(list(embedded.responses.input_items.list(final.id, limit=100))) == 9  # all of it still listed
    with pytest.raises(openai.BadRequestError) as caught:  # the same turn, without truncation
        embedded.responses.create(model="smollm2", input="Say OK.", previous_response_id=previous, max_output_tokens=16)
    assert caught.value.body["code"] == "context_length_exceeded"


def test_the_token_limit_cuts_the_answer_as_incomplete(embedded: openai.OpenAI) -> None:
    response = embedded.responses.create(
        model="smollm2", input="Write a long story about a dragon.", max_output_tokens=16
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16


def test_a_chain_gives_the_model_the_earlier_turns(embedded: openai.OpenAI) -> None:
    first = embedded.responses.create(
        model="smollm2", input="My name is Ada. Say hello to me.", temperature=0, max_output_tokens=20
    )
    second = embedded.responses.create(
        model="smollm2", input="What is my name?", previous_response_id=first.id, temperature=0, max_output_tokens=20
    )
    assert first.usage is not None and second.usage is not None
    # The second prompt holds the first turn's input and answer, then the new question.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.output_text
    items = list(embedded.responses.input_items.list(second.id, order="asc"))
    assert [i.type for i in items] == ["message", "message", "message"]

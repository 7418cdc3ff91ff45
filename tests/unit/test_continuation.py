"""Continuing a generation another worker began: which output can be continued, the request that
continues it, the translator taking it up, its usage, and the fake runtime going on from it."""

from __future__ import annotations

from typing import Any

import pytest

from app.catalog import ModelEntry, OpenAIModel, VllmModel
from app.protocol.accumulate import continuable
from app.protocol.create_request import parse_create_request
from app.service.validating import new_record
from tests.fake_runtime import _after, _words
from workers.jobs.generate import Generation, _with_earlier_runs
from workers.jobs.start_times import StartTimes
from workers.translation.chat_request import chat_request, continuing
from workers.translation.translate import StreamTranslator

TEXT = {"text": {"format": {"type": "text"}}}
SCHEMA = {"text": {"format": {"type": "json_schema"}}}


def message(status: str = "in_progress", text: str = "Hello wor") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": "msg_1", "type": "message", "status": status, "role": "assistant", "content": [part]}


@pytest.mark.parametrize(
    ("output", "settings", "expected"),
    [
        ([], TEXT, True),  # nothing was written: it starts afresh
        ([], SCHEMA, True),
        ([message()], TEXT, True),  # inside its answer's text
        ([message()], SCHEMA, False),  # the server would hold the rest to the schema from its start
        ([message("completed")], TEXT, False),  # past a finished item
        ([{"id": "rs_1", "type": "reasoning", "status": "in_progress", "content": []}], TEXT, False),
        ([{"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": '{"ci'}], TEXT, False),
        ([{"id": "rs_1", "type": "reasoning", "status": "completed"}, message()], TEXT, False),
    ],
)
def test_what_can_be_continued(output: list[dict[str, Any]], settings: dict[str, Any], expected: bool) -> None:
    assert continuable(output, settings) is expected


def test_the_continuing_request_is_the_same_request_with_the_answer_so_far_last() -> None:
    model: ModelEntry = VllmModel(id="m", runtime="vllm", model="org/m", max_output_tokens=100)
    body = chat_request(new_record(parse_create_request({"model": "m", "input": "Say it."}), model), [], model)
    continued = continuing(body, "Hello wor", model)
    assert continued["messages"] == [*body["messages"], {"role": "assistant", "content": "Hello wor"}]
    assert continued["continue_final_message"] is True and continued["add_generation_prompt"] is False
    assert continued["max_tokens"] == 100 - len(b"Hello wor") // 4  # what is left of the answer's room
    assert continuing(body, "", model) == body  # nothing written: the same request


def test_a_server_that_continues_a_trailing_assistant_message_itself_gets_no_flag() -> None:
    model = OpenAIModel(id="m", runtime="openai", base_url="http://x/v1", continuation="prefill")
    body = chat_request(new_record(parse_create_request({"model": "m", "input": "Say it."}), model), [], model)
    assert "continue_final_message" not in continuing(body, "Hello", model)


def test_the_translator_takes_the_answer_up_where_it_stopped() -> None:
    translator = StreamTranslator()
    assert translator.continue_from([message()]) == "Hello wor"
    events = translator.on_chunk({"choices": [{"delta": {"content": "ld"}, "finish_reason": "stop"}]})
    assert [e["type"] for e in events] == ["response.output_text.delta"]  # the same item: no new one opens
    assert events[0]["item_id"] == "msg_1" and events[0]["output_index"] == 0
    closing, [item] = translator.close()
    assert item["id"] == "msg_1" and item["content"][0]["text"] == "Hello world"
    assert closing[0]["text"] == "Hello world"


def test_a_continued_responses_usage_counts_each_runs_prompt_and_the_answer_so_far() -> None:
    last_run = {"input_tokens": 110, "output_tokens": 40, "total_tokens": 150, "input_tokens_details": {}}
    prefix = "x" * 40  # ~10 tokens, read by the last run as prompt
    usage = _with_earlier_runs(last_run, continued(1), prefix)
    assert usage["input_tokens"] == 110 + 100  # the first run's prompt (110 less the answer so far) again
    assert usage["output_tokens"] == 40 + 10 and usage["total_tokens"] == 260
    assert _with_earlier_runs(last_run, continued(0), "") == last_run


def test_a_continued_tool_loops_earlier_rounds_count_as_reported() -> None:
    """Its rounds before the continuation are in the usage already (`rounds_usage`): between two
    steps nothing is estimated; in the middle of an answer, only that answer's earlier run."""
    rounds = {"input_tokens": 300, "output_tokens": 20, "total_tokens": 320, "input_tokens_details": {}}
    with_rounds = {"input_tokens": 410, "output_tokens": 60, "total_tokens": 470, "input_tokens_details": {}}
    assert _with_earlier_runs(with_rounds, continued(1, rounds), "") == with_rounds
    usage = _with_earlier_runs(with_rounds, continued(1, rounds), "x" * 40)
    assert usage["input_tokens"] == 410 + (110 - 10) and usage["output_tokens"] == 60 + 10


def continued(times: int, rounds_usage: dict[str, Any] | None = None) -> Generation:
    model = OpenAIModel(id="m", runtime="openai", base_url="http://x/v1")
    record = new_record(parse_create_request({"model": "m", "input": "x"}), model)
    return Generation(record, model, [], StartTimes(None, None, None), times, rounds_usage=rounds_usage)


def test_the_fake_runtime_goes_on_where_the_answer_so_far_ends() -> None:
    chunks = _words("w0 w1 w2 w3")
    assert _after(chunks, "w0 w1") == [" w2", " w3"]
    assert _after(chunks, "") == chunks
    assert _after(chunks, "w0 w") == ["1 w2 w3"]  # mid-chunk: the rest of the text

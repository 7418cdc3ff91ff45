"""Chat chunks → Responses events: the structure the SDK's stream helper asserts."""

from __future__ import annotations

from typing import Any

import pytest

from app.protocol.accumulate import output_so_far
from workers.runtime_failure import RuntimeFailure
from workers.translation.tools import RuntimeTools
from workers.translation.translate import STEERED, AnswerSteered, StreamTranslator


def chunk(
    content: str | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choices = [] if usage else [{"delta": {"content": content} if content is not None else {}, "finish_reason": finish}]
    return {"choices": choices, **({"usage": usage} if usage else {})}


def run(*chunks: dict[str, Any]) -> tuple[StreamTranslator, list[dict[str, Any]]]:
    translator = StreamTranslator()
    events = [e for c in chunks for e in translator.on_chunk(c)]
    return translator, events


def test_text_opens_the_message_once_then_deltas() -> None:
    translator, events = run(chunk(""), chunk("Hel"), chunk("lo"), chunk(finish="stop"))
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert events[0]["item"]["content"] == [] and events[0]["item"]["status"] == "in_progress"
    item_id = events[0]["item"]["id"]
    assert all(e.get("item_id", item_id) == item_id for e in events)
    closing, output = translator.close()
    assert [e["type"] for e in closing] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert closing[0]["text"] == "Hello"
    assert output == [closing[-1]["item"]]
    assert output[0]["status"] == "completed" and output[0]["id"] == item_id


def test_length_finish_is_incomplete() -> None:
    translator, _ = run(chunk("a"), chunk(finish="length"))
    assert translator.incomplete_reason == "max_output_tokens"
    _, output = translator.close()
    assert output[0]["status"] == "incomplete"


def test_usage_keeps_totals_consistent_and_maps_details() -> None:
    translator, _ = run(
        chunk("a"),
        chunk(
            usage={
                "prompt_tokens": 10,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 3},
            }
        ),
    )
    assert translator.usage_object() == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 17,
    }


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10, "completion_tokens": None},
        {"prompt_tokens": 10, "completion_tokens": "2", "completion_tokens_details": "none"},
        {"prompt_tokens": 10, "completion_tokens": True, "prompt_tokens_details": None},
    ],
)
def test_usage_counts_that_are_not_counts_are_counted_from_the_chunks(usage: dict[str, Any]) -> None:
    """`completion_tokens: null` made the usage raise after the stream had ended, so the response
    was never finished (its followers waited for the reaper)."""
    translator, _ = run(chunk("a"), chunk("b"), chunk(usage=usage))
    assert translator.usage_object() == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    }


@pytest.mark.parametrize(
    ("delta", "what"),
    [
        ({"content": 5}, "content"),
        ({"reasoning_content": ["a"]}, "reasoning"),
        ({"tool_calls": [{"index": 0, "function": {"name": 3}}]}, "tool call name"),
        ({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}]}, "tool call arguments"),
    ],
)
def test_text_that_is_not_text_fails_the_generation_naming_it(delta: dict[str, Any], what: str) -> None:
    with pytest.raises(RuntimeFailure, match=f"model runtime sent {what} that is not text"):
        run({"choices": [{"delta": delta}]})


def test_partial_output_of_a_stopped_generation() -> None:
    translator, _ = run(chunk("par"), chunk("tial"))
    [item] = translator.partial_output()
    assert item["status"] == "incomplete" and item["content"][0]["text"] == "partial"
    assert StreamTranslator().partial_output() == []


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"delta": fields, "finish_reason": None}]}


def test_reasoning_then_text_are_two_items_in_order() -> None:
    translator, events = run(
        delta(role="assistant"),
        delta(reasoning_content="Let me "),
        delta(reasoning="think."),  # newer vLLM calls the field `reasoning`
        delta(content="Four."),
        chunk(finish="stop"),
    )
    closing, output = translator.close()
    assert [e["type"] for e in events + closing] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    reasoning, message = output
    assert reasoning["id"].startswith("rs_") and reasoning["type"] == "reasoning"
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}] and reasoning["summary"] == []
    assert message["content"][0]["text"] == "Four." and message["status"] == "completed"
    assert [e["output_index"] for e in events if "output_index" in e] == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    # Without a report from the server, the reasoning chunks count as reasoning tokens.
    assert translator.usage_object()["output_tokens_details"] == {"reasoning_tokens": 2}
    assert translator.usage_object()["output_tokens"] == 3


def call(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    function = {"arguments": arguments, **({"name": name} if name else {})}
    return delta(tool_calls=[{"index": index, **({"id": call_id} if call_id else {}), "function": function}])


def test_tool_calls_become_function_call_items_with_streamed_arguments() -> None:
    translator, events = run(
        delta(content="Checking."),
        call(0, "", "call_a", "get_weather"),
        call(0, '{"city": '),
        call(0, '"Paris"}'),
        call(1, '{"city": "Oslo"}', "call_b", "get_weather"),
        chunk(finish="tool_calls"),
    )
    closing, output = translator.close()
    types = [e["type"] for e in events + closing]
    assert types[6:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    message, first, second = output
    assert message["type"] == "message"
    assert first == {
        "id": first["id"],
        "type": "function_call",
        "status": "completed",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert first["id"].startswith("fc_") and second["call_id"] == "call_b" and second["arguments"] == '{"city": "Oslo"}'
    assert events[6]["item"]["arguments"] == "" and events[6]["item"]["status"] == "in_progress"
    done = next(e for e in closing if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "get_weather" and done["arguments"] == '{"city": "Oslo"}'
    assert translator.incomplete_reason is None  # a tool_calls finish is a completed response


def test_a_server_that_repeats_the_call_id_and_name_in_every_delta_makes_one_call() -> None:
    # llama.cpp's server sends id and name with every arguments delta.
    translator, _ = run(
        call(0, '{"city', "call_x", "get_weather"),
        call(0, '": "Paris"}', "call_x", "get_weather"),
        chunk(finish="tool_calls"),
    )
    _, [item] = translator.close()
    assert item["name"] == "get_weather" and item["arguments"] == '{"city": "Paris"}'


def test_a_call_without_an_id_gets_one() -> None:
    translator, _ = run(call(0, "{}", name="f"), chunk(finish="tool_calls"))
    _, [item] = translator.close()
    assert item["call_id"].startswith("call_")


def test_partial_output_keeps_finished_items_and_marks_the_last_incomplete() -> None:
    translator, _ = run(delta(reasoning_content="hmm"), delta(content="Half"))
    reasoning, message = translator.partial_output()
    assert reasoning["content"][0]["text"] == "hmm" and message["status"] == "incomplete"


SETTINGS: dict[str, Any] = {"reasoning": {"effort": None, "summary": None}, "requested": {}}


def reasoning_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"reasoning_content": text}, "finish_reason": None}]}


def test_reasoning_is_sealed_once_only_when_included_and_a_key_is_there() -> None:
    from app.protocol.sealing import Seal, new_key

    seal = Seal([new_key()])
    included = {**SETTINGS, "requested": {"include": ["reasoning.encrypted_content"]}}
    for settings, key, sealed in ((included, seal, True), (SETTINGS, seal, False), (included, None, False)):
        translator = StreamTranslator.for_settings(settings, key)
        events = translator.on_chunk(reasoning_chunk("think")) + translator.on_chunk(chunk("Hi"))
        done = next(e["item"] for e in events if e["type"] == "response.output_item.done")
        _, output = translator.close()
        assert ("encrypted_content" in done) is sealed and output[0] == done
        if sealed:
            assert seal.open(done["encrypted_content"]) == "think"


def test_calls_of_namespaced_and_custom_tools_map_back_to_their_tools() -> None:
    tools = [
        {"type": "function", "name": "ns__f", "parameters": None},
        {"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "function", "name": "f"}]},
        {"type": "custom", "name": "patch", "description": None},
    ]
    translator = StreamTranslator.for_settings({**SETTINGS, "tools": tools, "parallel_tool_calls": True})
    runtime_names = [f["function"]["name"] for f in translator.tools.functions]
    assert runtime_names == ["ns__f", "patch", "ns__f_2"]  # the namespace's function yields to the top-level name
    calls = [
        {"index": 0, "id": "c0", "function": {"name": "ns__f_2", "arguments": "{}"}},
        {"index": 1, "id": "c1", "function": {"name": "ns__f", "arguments": "{}"}},
        {"index": 2, "id": "c2", "function": {"name": "patch", "arguments": '{"input": "x'}},
        {"index": 2, "function": {"arguments": '\\ny"}'}},
    ]
    for call in calls:
        translator.on_chunk({"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": None}]})
    _, output = translator.close()
    assert [(o["type"], o["name"], o.get("namespace")) for o in output] == [
        ("function_call", "f", "ns"),
        ("function_call", "ns__f", None),
        ("custom_tool_call", "patch", None),
    ]
    assert output[2]["input"] == "x\ny"


def test_the_answer_held_to_a_grammar_is_the_named_custom_tools_input() -> None:
    tool = {"type": "custom", "name": "patch", "format": {"type": "grammar", "syntax": "regex", "definition": "a+"}}
    settings = {
        "tools": [tool],
        "tool_choice": {"type": "custom", "name": "patch"},
        "reasoning": {"summary": None},
    }
    translator = StreamTranslator.for_settings(settings)
    events = []
    for text in ["aa", "a"]:
        events += translator.on_chunk({"choices": [{"delta": {"content": text}, "finish_reason": None}]})
    closing, [item] = translator.close()
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.delta",
    ]
    assert [e["type"] for e in closing] == ["response.custom_tool_call_input.done", "response.output_item.done"]
    assert (item["type"], item["name"], item["input"], item["status"]) == (
        "custom_tool_call",
        "patch",
        "aaa",
        "completed",
    )
    assert output_so_far(events + closing) == [item]


def reasoning(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"reasoning_content": text}, "finish_reason": None}]}


def call_chunk(index: int, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    delta = {"index": index, "function": function, **({"id": f"call_{index}"} if name else {})}
    return {"choices": [{"delta": {"tool_calls": [delta]}, "finish_reason": None}]}


def test_a_steer_lets_the_open_item_finish_and_stops_before_the_next() -> None:
    translator = StreamTranslator()
    events = translator.on_chunk(reasoning("think"))
    translator.steered = True
    events += translator.on_chunk(reasoning(" more"))  # (the same item goes on)
    # The chunk that ends the reasoning and begins the message: the reasoning's end, nothing after.
    with pytest.raises(AnswerSteered) as steered:
        translator.on_chunk({"choices": [{"delta": {"reasoning_content": " last", "content": "Hi"}}]})
    events += steered.value.events
    types = [e["type"] for e in events]
    assert types[-1] == "response.output_item.done" and events[-1]["item"]["type"] == "reasoning"
    # The chunk's reasoning before the boundary is streamed too: the deltas add up to the item.
    streamed = "".join(e["delta"] for e in events if e["type"].endswith(".delta"))
    assert streamed == "think more last" == events[-1]["item"]["content"][0]["text"]
    assert "response.output_text.delta" not in types and types.count("response.output_item.added") == 1
    assert translator.incomplete_reason == STEERED
    closing, output = translator.close()  # (nothing left open: nothing closed twice)
    assert closing == [] and [i["type"] for i in output] == ["reasoning"]


def test_a_steer_before_any_output_stops_at_once_and_a_steer_after_the_last_item_changes_nothing() -> None:
    translator = StreamTranslator(steered=True)
    with pytest.raises(AnswerSteered) as steered:
        translator.on_chunk(chunk("Hi"))
    assert steered.value.events == [] and translator.close() == ([], [])

    translator, _ = run(chunk("Hi"))
    translator.steered = True
    translator.on_chunk(chunk(" there"))
    translator.on_chunk(chunk(finish="stop"))
    _, output = translator.close()
    assert translator.incomplete_reason is None and output[0]["content"][0]["text"] == "Hi there"


def test_a_steer_cuts_between_two_calls_keeping_the_first_whole() -> None:
    translator = StreamTranslator(tools=RuntimeTools.of([{"type": "function", "name": "f", "parameters": {}}]))
    translator.on_chunk(call_chunk(0, "f"))
    translator.steered = True
    translator.on_chunk(call_chunk(0, arguments='{"a": 1}'))
    with pytest.raises(AnswerSteered) as steered:
        translator.on_chunk(call_chunk(1, "f"))
    assert [e["type"] for e in steered.value.events] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    _, output = translator.close()
    assert [(i["call_id"], i["arguments"], i["status"]) for i in output] == [("call_0", '{"a": 1}', "completed")]


def test_llama_cpps_cached_prompt_tokens_are_read_from_its_timings() -> None:
    """llama.cpp's server reports no prompt_tokens_details: its last chunk's timings say cache_n."""
    translator = StreamTranslator()
    translator.on_chunk({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
    translator.on_chunk(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 1, "total_tokens": 121},
            "timings": {"cache_n": 96, "prompt_n": 24},
        }
    )
    assert translator.usage_object()["input_tokens_details"] == {"cached_tokens": 96}

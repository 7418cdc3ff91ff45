from __future__ import annotations

from app.protocol.accumulate import output_so_far
from workers.translation.translate import StreamTranslator


def test_partial_output_matches_what_the_translator_built() -> None:
    translator = StreamTranslator()
    events = []
    for text in ["Hel", "lo", " there"]:
        events += translator.on_chunk({"choices": [{"delta": {"content": text}, "finish_reason": None}]})
    [item] = output_so_far(events)
    assert item["content"][0]["text"] == "Hello there"
    assert item["status"] == "in_progress"
    closing, output = translator.close()
    assert output_so_far(events + closing) == output
    assert output_so_far([]) == []

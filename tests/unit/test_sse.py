from __future__ import annotations

import json

from app.streaming.sse import encode


def test_event_line_equals_type_and_obfuscation_only_on_deltas() -> None:
    delta = encode({"type": "response.output_text.delta", "delta": "hi", "sequence_number": 3}, obfuscate=True)
    event_line, data_line, *_ = delta.decode().split("\n")
    payload = json.loads(data_line.removeprefix("data: "))
    assert event_line == "event: response.output_text.delta"
    assert payload["sequence_number"] == 3 and payload["obfuscation"]
    done = encode({"type": "response.completed", "sequence_number": 4}, obfuscate=True)
    assert "obfuscation" not in done.decode()
    plain = encode({"type": "response.output_text.delta", "delta": "hi"}, obfuscate=False)
    assert "obfuscation" not in plain.decode()
    assert delta.endswith(b"\n\n")

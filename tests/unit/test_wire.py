from __future__ import annotations

import json

from app.streaming.sse import encode
from app.streaming.wire import WireEvent, decode_batch, encode_batch


def test_a_batch_survives_the_trip() -> None:
    tricky = 'a b\nc "q" \u00e9'  # a newline, quotes and non-ASCII inside the text
    events = [
        WireEvent.of({"type": "response.output_text.delta", "delta": tricky, "sequence_number": 4}),
        WireEvent.of({"type": "response.completed", "sequence_number": 5, "response": {"id": "r"}}),
    ]
    assert decode_batch(encode_batch(events).encode()) == events
    assert events[0].data()["delta"] == tricky


def test_sse_passes_the_json_through_and_pads_only_deltas() -> None:
    delta = WireEvent.of({"type": "response.output_text.delta", "delta": "hi", "sequence_number": 3})
    event_line, data_line, *_ = encode(delta, obfuscate=True).decode().split("\n")
    payload = json.loads(data_line.removeprefix("data: "))
    assert event_line == "event: response.output_text.delta"
    assert payload["sequence_number"] == 3 and payload["delta"] == "hi" and payload["obfuscation"]
    done = WireEvent.of({"type": "response.completed", "sequence_number": 4})
    assert "obfuscation" not in encode(done, obfuscate=True).decode()
    assert encode(delta, obfuscate=False) == f"event: response.output_text.delta\ndata: {delta.json}\n\n".encode()

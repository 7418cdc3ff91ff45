from __future__ import annotations

import json

from app.streaming.sse import encode
from app.wire import WireEvent, decode_message, encode_message


def test_a_commit_of_many_responses_survives_the_trip_and_each_reader_takes_its_own() -> None:
    tricky = 'a b\nc "q" \u00e9 12 x'  # a newline, quotes, non-ASCII and what looks like a header
    committed = {
        "resp_a": [
            WireEvent.of({"type": "response.output_text.delta", "delta": tricky, "sequence_number": 4}),
            WireEvent.of({"type": "response.completed", "sequence_number": 5, "response": {"id": "r"}}),
        ],
        "resp_b": [WireEvent.of({"type": "response.output_text.delta", "delta": "\n\n", "sequence_number": 0})],
        "resp_c": [WireEvent.of({"type": "response.in_progress", "sequence_number": 1})],
    }
    message = encode_message(committed)
    assert dict(decode_message(message, committed)) == committed
    assert dict(decode_message(message, {"resp_c", "resp_a"})) == {
        "resp_a": committed["resp_a"],
        "resp_c": committed["resp_c"],
    }
    assert dict(decode_message(message, {"resp_unknown"})) == {}
    assert committed["resp_a"][0].data()["delta"] == tricky


def test_sse_passes_the_json_through_and_pads_only_deltas() -> None:
    delta = WireEvent.of({"type": "response.output_text.delta", "delta": "hi", "sequence_number": 3})
    event_line, data_line, *_ = encode(delta, obfuscate=True).decode().split("\n")
    payload = json.loads(data_line.removeprefix("data: "))
    assert event_line == "event: response.output_text.delta"
    assert payload["sequence_number"] == 3 and payload["delta"] == "hi" and payload["obfuscation"]
    done = WireEvent.of({"type": "response.completed", "sequence_number": 4})
    assert "obfuscation" not in encode(done, obfuscate=True).decode()
    assert encode(delta, obfuscate=False) == f"event: response.output_text.delta\ndata: {delta.json}\n\n".encode()

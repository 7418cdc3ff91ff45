from __future__ import annotations

import json

from app.events.channel import INLINE_BYTES, MESSAGE_BYTES, Notice, decode_events, decode_message, encode_message
from app.events.sse import encode
from app.protocol.encoding import WireEvent


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
    message, left_out = encode_message(committed)
    assert left_out == {}
    assert dict(decode_message(message, committed)) == committed
    assert dict(decode_message(message, {"resp_c", "resp_a"})) == {
        "resp_a": committed["resp_a"],
        "resp_c": committed["resp_c"],
    }
    assert dict(decode_message(message, {"resp_unknown"})) == {}
    assert committed["resp_a"][0].data()["delta"] == tricky


def delta(response_size: int, sequence_number: int = 0) -> WireEvent:
    return WireEvent.of(
        {"type": "response.output_text.delta", "delta": "x" * response_size, "sequence_number": sequence_number}
    )


def test_events_too_large_for_a_message_travel_as_a_notice_and_the_rest_as_they_are() -> None:
    big = [delta(10), delta(INLINE_BYTES, 1), delta(10, 2)]
    committed = {"resp_small": [delta(10)], "resp_big": big, "resp_after": [delta(20, 7)]}
    message, left_out = encode_message(committed)
    assert len(message) < 1000
    assert dict(decode_message(message, committed)) == {
        "resp_small": committed["resp_small"],
        "resp_big": Notice(0, 2),
        "resp_after": committed["resp_after"],
    }
    assert list(left_out) == ["resp_big"] and decode_events(left_out["resp_big"]) == big


def test_a_message_stays_small_however_many_responses_end_in_one_commit() -> None:
    committed = {f"resp_{n}": [delta(INLINE_BYTES // 2)] for n in range(40)}
    message, left_out = encode_message(committed)
    assert len(message) <= MESSAGE_BYTES + 40 * 64
    carried = dict(decode_message(message, committed))
    assert 0 < len(left_out) < 40 and left_out.keys() == {r for r, e in carried.items() if isinstance(e, Notice)}
    assert all(carried[r] == committed[r] for r in committed.keys() - left_out.keys())


def test_sse_passes_the_json_through_and_pads_only_deltas() -> None:
    delta = WireEvent.of({"type": "response.output_text.delta", "delta": "hi", "sequence_number": 3})
    event_line, data_line, *_ = encode(delta, obfuscate=True).decode().split("\n")
    payload = json.loads(data_line.removeprefix("data: "))
    assert event_line == "event: response.output_text.delta"
    assert payload["sequence_number"] == 3 and payload["delta"] == "hi" and payload["obfuscation"]
    done = WireEvent.of({"type": "response.completed", "sequence_number": 4})
    assert "obfuscation" not in encode(done, obfuscate=True).decode()
    assert encode(delta, obfuscate=False) == f"event: response.output_text.delta\ndata: {delta.json}\n\n".encode()

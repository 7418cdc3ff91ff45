"""Events as they travel: each one's JSON is encoded once, where it is numbered, and passed
through as text to every follower — followers never decode and re-encode it.

On Redis a batch is one message, one event per line: `<sequence_number> <type> <json>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WireEvent:
    sequence_number: int
    type: str
    json: str  # the whole event, sequence_number included

    @classmethod
    def of(cls, event: Event) -> WireEvent:
        return cls(event.get("sequence_number", -1), event["type"], json.dumps(event, separators=(",", ":")))

    def data(self) -> Event:
        decoded: Event = json.loads(self.json)
        return decoded


def encode_batch(events: Iterable[WireEvent]) -> str:
    return "\n".join(f"{e.sequence_number} {e.type} {e.json}" for e in events)


def decode_batch(message: bytes | str) -> list[WireEvent]:
    text = message.decode() if isinstance(message, bytes) else message
    batch = []
    for line in text.split("\n"):
        sequence_number, event_type, payload = line.split(" ", 2)
        batch.append(WireEvent(int(sequence_number), event_type, payload))
    return batch

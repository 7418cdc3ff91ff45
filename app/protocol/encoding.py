"""Events as they travel and as they are stored: each one's JSON is encoded once, where it is
numbered, and passed through as text to every follower — followers never decode and re-encode it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from app.protocol.shapes import Event


@dataclass(frozen=True, slots=True)
class WireEvent:
    sequence_number: int
    type: str
    json: str  # the whole event, sequence_number included

    @classmethod
    def of(cls, event: Event) -> WireEvent:
        return cls(event.get("sequence_number", -1), event["type"], encode(event))

    def data(self) -> Event:
        decoded: Event = json.loads(self.json)
        return decoded


def encode(event: Event) -> str:
    return orjson.dumps(event).decode()


def numbered(events: Sequence[Event], encoded: Sequence[str], first: int) -> list[WireEvent]:
    """Encoded, unnumbered events with their sequence numbers from `first`, spliced into the
    text: numbering never costs a second encoding."""
    return [
        WireEvent(first + i, event["type"], f'{text[:-1]},"sequence_number":{first + i}}}')
        for i, (event, text) in enumerate(zip(events, encoded, strict=True))
    ]

"""Events as they travel: each one's JSON is encoded once, where it is numbered, and passed
through as text to every follower — followers never decode and re-encode it.

On Redis, what one commit stored is one message on the deployment's events channel, whatever
the number of responses in it: per response a header line `<response_id> <byte length>`, then
its events, one per line: `<sequence_number> <type> <json>`. A reader skips the responses it does
not follow by their length, without reading their events. One channel rather than one per
response: hundreds of streams cost an API process one message per commit instead of one per
stream, and no SUBSCRIBE round trip before each stream starts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

log = logging.getLogger(__name__)

Event = dict[str, Any]

TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})


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


def encode_message(committed: Mapping[str, Sequence[WireEvent]]) -> bytes:
    parts = []
    for response_id, events in committed.items():
        body = "\n".join(f"{e.sequence_number} {e.type} {e.json}" for e in events).encode()
        parts += [f"{response_id} {len(body)}\n".encode(), body]
    return b"".join(parts)


def decode_message(message: bytes, wanted: Container[str]) -> Iterator[tuple[str, list[WireEvent]]]:
    """The events of each response in `wanted`, in the order published."""
    position = 0
    while position < len(message):
        header_end = message.index(b"\n", position)
        response_id, length = message[position:header_end].decode().split(" ")
        position = header_end + 1 + int(length)
        if response_id in wanted:
            yield response_id, _events(message[header_end + 1 : position].decode())


def _events(text: str) -> list[WireEvent]:
    events = []
    for line in text.split("\n"):
        sequence_number, event_type, payload = line.split(" ", 2)
        events.append(WireEvent(int(sequence_number), event_type, payload))
    return events


async def publish(redis: Redis, channel: str, committed: Mapping[str, Sequence[WireEvent]]) -> None:
    """Wakes the followers of each response with its newly committed events. A lost message
    costs latency, never data: followers re-read Postgres when idle."""
    if not committed:
        return
    try:
        await redis.publish(channel, encode_message(committed))
    except Exception:
        log.warning("could not publish the events of %d responses", len(committed), exc_info=True)

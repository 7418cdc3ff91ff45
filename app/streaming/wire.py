"""Events as they travel: each one's JSON is encoded once, where it is numbered, and passed
through as text to every follower — followers never decode and re-encode it.

On Redis a batch is one message, one event per line: `<sequence_number> <type> <json>`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from app.redis_keys import events_channel

log = logging.getLogger(__name__)

Event = dict[str, Any]


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


def encode_batch(events: Iterable[WireEvent]) -> str:
    return "\n".join(f"{e.sequence_number} {e.type} {e.json}" for e in events)


def decode_batch(message: bytes | str) -> list[WireEvent]:
    text = message.decode() if isinstance(message, bytes) else message
    batch = []
    for line in text.split("\n"):
        sequence_number, event_type, payload = line.split(" ", 2)
        batch.append(WireEvent(int(sequence_number), event_type, payload))
    return batch


# Many responses' publishes as one command (redis-py spends about 2.4 times the CPU on a
# pipeline of one PUBLISH per response): each response's events on its own channel.
_PUBLISH_ALL = """
for i = 1, #ARGV, 2 do redis.call('PUBLISH', ARGV[i], ARGV[i + 1]) end
"""


async def publish(redis: Redis, committed: Mapping[str, Sequence[WireEvent]]) -> None:
    """Wakes the followers of each response with its newly committed events. A lost message
    costs latency, never data: followers re-read Postgres when idle."""
    if not committed:
        return
    arguments = []
    for response_id, events in committed.items():
        arguments += [events_channel(response_id), encode_batch(events)]
    try:
        await redis.register_script(_PUBLISH_ALL)(args=arguments)
    except Exception:
        log.warning("could not publish the events of %d responses", len(committed), exc_info=True)

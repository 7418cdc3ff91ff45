"""The events channel: how committed events reach the API processes that follow them.

On Redis, what one commit stored is one message on the deployment's events channel, whatever
the number of responses in it: per response a header line `<response_id> <byte length>`, then
its events, one per line: `<sequence_number> <type> <json>`. A reader skips the responses it does
not follow by their length, without reading their events. One channel rather than one per
response: hundreds of streams cost an API process one message per commit instead of one per
stream, and no SUBSCRIBE round trip before each stream starts.

A message stays small whatever the answer: a response's events travel in it only up to
INLINE_BYTES (and the whole message up to MESSAGE_BYTES). Past that the response gets a notice
instead, `<first> * <last>`: events first..last were committed, read them from the log in Postgres
or, for a transient response, from its overflow key. Redis closes a subscriber whose unread
messages pass its output buffer limit (32 MB by default), so one large answer carried whole would
cut every API process off the live events.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from app.protocol.encoding import WireEvent
from app.queue.redis_keys import OVERFLOW_PREFIX, OVERFLOW_TTL_SECONDS
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK

log = logging.getLogger(__name__)

INLINE_BYTES = 64 * 1024  # one response's events in one message
MESSAGE_BYTES = 512 * 1024  # all of them
_NOTICE = "*"


@dataclass(frozen=True, slots=True)
class Notice:
    """Events `first` to `last` of a response were committed, but are too large to travel here."""

    first: int
    last: int


def overflow_key(response_id: str, first: int) -> str:
    return f"{OVERFLOW_PREFIX}{response_id}:{first}"


def _body(events: Sequence[WireEvent]) -> bytes:
    return "\n".join(f"{e.sequence_number} {e.type} {e.json}" for e in events).encode()


def encode_message(
    committed: Mapping[str, Sequence[WireEvent]], spill: Container[str] = frozenset()
) -> tuple[bytes, dict[str, bytes]]:
    """The message, and the bodies of the responses it carries only a notice of: those too large
    for it, and those in `spill`."""
    parts: list[bytes] = []
    left_out: dict[str, bytes] = {}
    room = MESSAGE_BYTES
    for response_id, events in committed.items():
        if not events:
            continue
        body = _body(events)
        if response_id in spill or len(body) > min(INLINE_BYTES, room):
            left_out[response_id] = body
            body = f"{events[0].sequence_number} {_NOTICE} {events[-1].sequence_number}".encode()
        room -= len(body)
        parts += [f"{response_id} {len(body)}\n".encode(), body]
    return b"".join(parts), left_out


def decode_message(message: bytes, wanted: Container[str]) -> Iterator[tuple[str, list[WireEvent] | Notice]]:
    """The events (or the notice) of each response in `wanted`, in the order published."""
    position = 0
    while position < len(message):
        header_end = message.index(b"\n", position)
        response_id, length = message[position:header_end].decode().split(" ")
        position = header_end + 1 + int(length)
        if response_id in wanted:
            events = decode_events(message[header_end + 1 : position])
            if len(events) == 1 and events[0].type == _NOTICE:
                yield response_id, Notice(events[0].sequence_number, int(events[0].json))
            else:
                yield response_id, events


def decode_events(body: bytes) -> list[WireEvent]:
    events = []
    for line in body.decode().split("\n"):
        sequence_number, event_type, payload = line.split(" ", 2)
        events.append(WireEvent(int(sequence_number), event_type, payload))
    return events


async def publish(
    redis: Redis,
    channel: str,
    committed: Mapping[str, Sequence[WireEvent]],
    transient: Container[str] = frozenset(),
    spill: Container[str] = frozenset(),
) -> bool:
    """Wakes the followers of each response with its newly committed events; False if Redis
    could not be reached. A lost message costs latency, never data, to a durable response:
    followers re-read Postgres when idle. The events of a `transient` response too large for the
    message, or in `spill`, wait in its overflow key (set before the message goes), where a
    follower that missed the message finds them too."""
    if not committed:
        return True
    message, left_out = encode_message(committed, spill)
    overflowing = [response_id for response_id in left_out if response_id in transient]
    try:
        if not overflowing:  # (most commits: a pipeline's machinery costs more than the command)
            await redis.publish(channel, message)
        else:
            async with redis.pipeline(transaction=False) as pipe:
                for response_id in overflowing:
                    first = committed[response_id][0].sequence_number
                    pipe.set(overflow_key(response_id, first), left_out[response_id], ex=OVERFLOW_TTL_SECONDS)
                pipe.publish(channel, message)
                await pipe.execute()
    except REDIS_DOWN as error:
        REDIS_LINK.failed("publishing events", error)
        return False
    REDIS_LINK.answered()
    return True


async def read_overflow(redis: Redis, response_id: str, after: int) -> list[WireEvent]:
    """The events after `after` that a transient response's worker left in overflow keys, in
    order, as far as they run on without a gap; each key is read once (its one follower has them)."""
    events: list[WireEvent] = []
    while True:
        key = overflow_key(response_id, after + 1)
        async with redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.delete(key)
            body, _ = await pipe.execute()
        if not body:
            return events
        events += decode_events(body)
        after = events[-1].sequence_number

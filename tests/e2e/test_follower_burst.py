"""A burst of followers is admitted, not refused: thousands of SSE followers connecting to one API
process at the same moment, each replaying a running response's log from its start and then
following it live, all get every event once, in order; none is refused, none gets an error
event after its 200."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import aiohttp

from tests.conftest import Environment, FakeRuntime
from tests.e2e.processes import Stack

FOLLOWERS = 2000
RESPONSES = 10


@dataclass
class Followed:
    status: int = 0
    numbers: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)


async def follow(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Followed:
    followed = Followed()
    async with http.get(url, params={"stream": "true", "starting_after": "-1"}, headers=headers) as answer:
        followed.status = answer.status
        async for line in answer.content:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                followed.numbers.append(event.get("sequence_number", -1))
                followed.types.append(event["type"])
    return followed


async def burst(stack: Stack, ids: list[str]) -> list[Followed]:
    headers = {"Authorization": f"Bearer {stack.client.api_key}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        urls = [f"http://127.0.0.1:{stack.port}/v1/responses/{ids[n % len(ids)]}" for n in range(FOLLOWERS)]
        return await asyncio.gather(*(follow(http, url, headers) for url in urls))


def test_thousands_of_followers_connecting_at_once_each_get_every_event_in_order(
    environment: Environment, fake: FakeRuntime
) -> None:
    script = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(40)), "delay": 0.1})
    with Stack(environment, RESPONSES_LEASE_SECONDS="30") as stack:
        stack.start_worker()
        ids = []
        for _ in range(RESPONSES):
            with stack.client.responses.create(model="fake", input=script, background=True, stream=True) as created:
                ids.append(next(iter(created)).response.id)  # its first event names it; it goes on in the background
        followed = asyncio.run(burst(stack, ids))
        refused = [f.status for f in followed if f.status != 200]
        assert refused == []
        assert [f for f in followed if "error" in f.types] == []
        for f in followed:
            assert f.numbers == list(range(len(f.numbers))) and f.types[-1] == "response.completed"

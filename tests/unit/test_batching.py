"""Many callers' round trips as one: who goes together, and what each caller gets back."""

from __future__ import annotations

import asyncio

import pytest

from app.process.batching import Batched


async def settle() -> None:
    """Lets every ready task run until all wait."""
    for _ in range(5):
        await asyncio.sleep(0)


class Backend:
    """Records each batch it is asked; each call waits until released."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail_next = False

    async def run(self, keys: list[int]) -> dict[int, str | Exception]:
        self.batches.append(keys)
        await self.release.wait()
        self.release.clear()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the backend is away")
        # 13 has no value; 66 is refused on its own.
        return {key: ValueError(f"no {key}") if key == 66 else f"value {key}" for key in keys if key != 13}


async def test_keys_asked_for_during_a_call_go_together_in_the_next() -> None:
    backend = Backend()
    batched = Batched(backend.run, "test")
    first = asyncio.create_task(batched(1))
    await settle()
    assert backend.batches == [[1]]  # an idle batcher sends at once
    rest = [asyncio.create_task(batched(key)) for key in (2, 3, 13, 2)]
    await settle()
    backend.release.set()
    assert await first == "value 1"
    await settle()
    assert backend.batches == [[1], [2, 3, 13]]  # a key asked twice is asked once
    backend.release.set()
    assert await asyncio.gather(*rest) == ["value 2", "value 3", None, "value 2"]


async def test_a_failed_call_fails_its_callers_only_and_a_cancelled_caller_leaves_the_others() -> None:
    backend = Backend()
    batched = Batched(backend.run, "test")
    backend.fail_next = True
    failing = asyncio.create_task(batched(1))
    await settle()
    later = [asyncio.create_task(batched(key)) for key in (2, 3)]
    await settle()
    backend.release.set()
    with pytest.raises(ConnectionError):
        await failing
    await settle()
    later[0].cancel()
    backend.release.set()
    assert await later[1] == "value 3"
    assert later[0].cancelled()
    assert backend.batches == [[1], [2, 3]]


async def test_a_key_refused_on_its_own_fails_its_callers_and_no_other() -> None:
    backend = Backend()
    batched = Batched(backend.run, "test")
    callers = [asyncio.create_task(batched(key)) for key in (4, 66, 5, 66)]
    await settle()
    backend.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert results[0] == "value 4" and results[2] == "value 5"
    assert all(isinstance(r, ValueError) and str(r) == "no 66" for r in (results[1], results[3]))


class Lanes:
    """Records each call; each waits for its own release."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], asyncio.Event]] = []

    async def run(self, keys: list[int]) -> dict[int, str]:
        release = asyncio.Event()
        self.calls.append((keys, release))
        await release.wait()
        return {key: f"value {key}" for key in keys}

    def release(self, call: int) -> None:
        self.calls[call][1].set()


async def test_keys_waiting_behind_a_slow_call_go_in_a_lane_of_their_own() -> None:
    backend = Lanes()
    batched = Batched(backend.run, "test", lanes=2, slow_seconds=0.05)
    stuck = asyncio.create_task(batched(1))
    await settle()
    behind = [asyncio.create_task(batched(key)) for key in (2, 3)]
    await asyncio.sleep(0.1)
    assert [keys for keys, _ in backend.calls] == [[1], [2, 3]]  # beside the slow one, together
    backend.release(1)
    assert await asyncio.gather(*behind) == ["value 2", "value 3"]
    assert not stuck.done()
    late = asyncio.create_task(batched(4))  # the slow one still runs: a lane again
    await asyncio.sleep(0.1)
    assert [keys for keys, _ in backend.calls] == [[1], [2, 3], [4]]
    backend.release(2)
    assert await late == "value 4"
    backend.release(0)
    assert await stuck == "value 1"


async def test_keys_behind_a_call_that_is_not_slow_wait_for_it_and_go_together() -> None:
    backend = Lanes()
    batched = Batched(backend.run, "test", lanes=2, slow_seconds=10)
    first = asyncio.create_task(batched(1))
    await settle()
    rest = [asyncio.create_task(batched(key)) for key in (2, 3)]
    await asyncio.sleep(0.05)
    backend.release(0)
    assert await first == "value 1"
    await settle()
    assert [keys for keys, _ in backend.calls] == [[1], [2, 3]]
    backend.release(1)
    assert await asyncio.gather(*rest) == ["value 2", "value 3"]


async def test_one_lane_never_opens_another() -> None:
    backend = Lanes()
    batched = Batched(backend.run, "test", slow_seconds=0.01)
    first = asyncio.create_task(batched(1))
    await settle()
    second = asyncio.create_task(batched(2))
    await asyncio.sleep(0.05)
    assert [keys for keys, _ in backend.calls] == [[1]]
    backend.release(0)
    await first
    await settle()
    backend.release(1)
    assert await second == "value 2"

"""An account's requests and tokens per fixed window, counted in Redis (the policy that reads
them: app/service/admission.py). One script call counts a create's request and its estimated
tokens, or refuses it without counting; its real tokens are settled when it ends."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from app.queue.redis_keys import LIMIT_PREFIX, refusals_key

# One call for both of a create's counters. KEYS: the requests counter, the tokens counter. ARGV:
# requests limit (0: none), tokens limit (0: none), the estimate, the window (s). Counts only when
# nothing is over: a refused request costs its account nothing. Returns the refusal (0 none,
# 1 requests, 2 tokens), then the requests and tokens used in the window, and the seconds until
# it ends.
_ADMIT = """
local requests = tonumber(redis.call('GET', KEYS[1]) or '0')
local tokens = tonumber(redis.call('GET', KEYS[2]) or '0')
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then ttl = tonumber(ARGV[4]) end
local refused = 0
if tonumber(ARGV[1]) > 0 and requests + 1 > tonumber(ARGV[1]) then refused = 1
elseif tonumber(ARGV[2]) > 0 and tokens + tonumber(ARGV[3]) > tonumber(ARGV[2]) then refused = 2
end
if refused == 0 then
    requests = redis.call('INCR', KEYS[1])
    tokens = redis.call('INCRBY', KEYS[2], ARGV[3])
    redis.call('EXPIRE', KEYS[1], ARGV[4], 'NX')
    redis.call('EXPIRE', KEYS[2], ARGV[4], 'NX')
end
return {refused, requests, tokens, ttl}
"""

# A response's real tokens in place of its estimate, in the window it was admitted in (if that
# window is still counting). KEYS: the tokens counter; ARGV: real minus estimated.
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], ARGV[1]) end
"""


_REFUSALS: dict[int, Literal["requests", "tokens"]] = {1: "requests", 2: "tokens"}  # the script's codes


@dataclass(frozen=True, slots=True)
class WindowCount:
    """The window's counts after a create was counted (or refused: then before it)."""

    refused: Literal["requests", "tokens"] | None
    requests: int
    tokens: int
    reset: int  # seconds until the window ends
    tokens_key: str  # where the create's real tokens are settled


async def count(
    redis: Redis, account_id: str, window_seconds: int, requests_limit: int, tokens_limit: int, estimate: int
) -> WindowCount:
    """Counts one request of `estimate` tokens in the account's current window, unless that would
    pass a limit (0: none)."""
    window = int(time.time()) // window_seconds
    requests_key = f"{LIMIT_PREFIX}requests:{account_id}:{window}"
    tokens_key = f"{LIMIT_PREFIX}tokens:{account_id}:{window}"
    args = [str(n) for n in (requests_limit, tokens_limit, estimate, window_seconds)]
    refused, requests, tokens, reset = await redis.eval(_ADMIT, 2, requests_key, tokens_key, *args)  # type: ignore[misc]
    return WindowCount(_REFUSALS.get(int(refused)), int(requests), int(tokens), int(reset), tokens_key)


async def settle(redis: Redis, tokens_key: str, real_minus_estimate: int) -> None:
    """A response's real tokens in place of its estimate, in its window if that still counts."""
    await redis.eval(_SETTLE, 1, tokens_key, str(real_minus_estimate))  # type: ignore[misc]


# Creates refused (429) per account and day (UTC), for the console (redis_keys.refusals_key).
REFUSALS_KEPT_DAYS = 8


async def count_refusal(redis: Redis, account_id: str) -> None:
    key = refusals_key(account_id, int(time.time() // 86400))
    async with redis.pipeline(transaction=False) as pipe:
        pipe.incr(key)
        pipe.expire(key, REFUSALS_KEPT_DAYS * 86400)
        await pipe.execute()


async def refusals_by_day(redis: Redis, account_id: str, days: int = 7) -> list[tuple[int, int]]:
    """(day number since the epoch, creates refused) for the last `days` days, oldest first."""
    today = int(time.time() // 86400)
    numbers = list(range(today - days + 1, today + 1))
    counts = await redis.mget([refusals_key(account_id, day) for day in numbers])
    return [(day, int(count or 0)) for day, count in zip(numbers, counts, strict=True)]

"""Redis as this process last found it: an outage is a blip to ride out, not a fault.

Every Redis operation a process makes in the background (the queue's poll, the listeners, leases
of transient responses, heartbeats, publishing events) reports here whether Redis answered. The
first failure of an outage is logged once, with what failed; the recovery is logged with how long
it lasted; everything between goes to the debug log, since each retry loop would otherwise log a
line a second. `/ready` asks Redis itself; the metrics `responses_redis_up` and
`responses_redis_outages` come from here. Retry loops pause with `Backoff`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError

from app.process.metrics import REDIS_OUTAGES, REDIS_UP

log = logging.getLogger(__name__)

# What a lost or refused connection to Redis raises (redis-py's ConnectionError and TimeoutError
# are RedisErrors; a socket can raise an OSError of its own).
REDIS_DOWN = (RedisError, OSError)


class RedisLink:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the lease keeper's thread reports too
        self._down_since: float | None = None
        self._up_since = float("-inf")  # up for ever, as far as this process knows
        REDIS_UP.set(1)

    def failed(self, what: str, error: BaseException) -> None:
        with self._lock:
            if self._down_since is not None:
                log.debug("Redis still unreachable (%s: %s)", what, error)
                return
            self._down_since = time.monotonic()
        REDIS_UP.set(0)
        REDIS_OUTAGES.inc()
        log.warning("Redis is unreachable (%s: %s: %s); retrying until it is back", what, type(error).__name__, error)

    def answered(self) -> None:
        if self._down_since is None:  # the common case, on hot paths: no lock
            return
        with self._lock:
            if self._down_since is None:
                return
            self._up_since = time.monotonic()
            lasted, self._down_since = self._up_since - self._down_since, None
        REDIS_UP.set(1)
        log.warning("Redis is back after %.1fs", lasted)

    @contextmanager
    def tolerated(self, what: str) -> Iterator[None]:
        """Runs the block's Redis operations; an outage is reported and swallowed (the caller
        retries later), any other error goes on. (A block that ends well may have made no
        Redis call at all: Redis's return is reported by the calls that always make one.)"""
        try:
            yield
        except REDIS_DOWN as error:
            self.failed(what, error)

    @property
    def down_for(self) -> float:
        """Seconds since this outage began; 0 while Redis answers."""
        down_since = self._down_since
        return 0.0 if down_since is None else time.monotonic() - down_since

    @property
    def up_for(self) -> float:
        """Seconds since Redis last came back (or since the process started); 0 while it is away."""
        return 0.0 if self._down_since is not None else time.monotonic() - self._up_since


class Backoff:
    """Pauses between retries: doubling from `first` up to `most`, with jitter so that the
    processes of a deployment do not all come back in the same instant."""

    def __init__(self, first: float = 0.1, most: float = 2.0) -> None:
        self._first = first
        self._most = most
        self._next = first

    def next(self) -> float:
        delay, self._next = self._next, min(self._next * 2, self._most)
        return delay * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        self._next = self._first


REDIS_LINK = RedisLink()  # one per process

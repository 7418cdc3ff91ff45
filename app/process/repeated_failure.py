"""A failure that repeats while its cause lasts (the database away, a peer down): logged once when
it begins, with its traceback; counted, at debug level, while it lasts; logged once when it ends,
with how many times and how long it failed. An outage is then two lines in the log, not a
traceback a second from every loop that retries (as Redis outages are, app/queue/redis_link.py)."""

from __future__ import annotations

import logging
import time


class RepeatedFailure:
    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self._log = logger
        self.failures = 0  # in a row, since it last succeeded
        self._since = 0.0

    def failed(self) -> None:
        """Called in the `except` block: the first failure of a run is logged with its traceback."""
        self.failures += 1
        if self.failures == 1:
            self._since = time.monotonic()
            self._log.warning("%s failed; retrying, and saying when it succeeds again", self.what, exc_info=True)
        else:
            self._log.debug("%s failed again (%d in a row)", self.what, self.failures, exc_info=True)

    def succeeded(self) -> None:
        if self.failures:
            lasted = time.monotonic() - self._since
            self._log.warning("%s succeeds again after %d failures over %.1fs", self.what, self.failures, lasted)
            self.failures = 0

"""Garbage-collector settings for the long-running processes (API and workers).

Streaming allocates many short-lived dicts and strings per token; with CPython's default
thresholds the cyclic collector ran hundreds of times a second, scanning everything the
process holds. Objects that exist once the process has started (modules, the catalog, pools)
are frozen out of those scans, and young collections run less often. Reference counting
still frees almost everything at once; only cycles wait for a collection.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # CPython's default is 700 allocations


def tune_after_startup() -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)

"""What a worker keeps of the conversations and chains it serves between their turns: copies,
bounded by the sum of their sizes (the length of their items' JSON), least recently used first
out. A copy is taken out while a turn extends it and kept again after (workers/caches/conversation_items.py,
workers/caches/chain_contexts.py)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeptCopies(Generic[K, V]):
    def __init__(self, limit_bytes: int, size_of: Callable[[V], int]) -> None:
        self.limit_bytes = limit_bytes
        self._size_of = size_of
        self._copies: OrderedDict[K, V] = OrderedDict()
        self.bytes_kept = 0

    def take(self, key: K) -> V | None:
        """The copy of `key`, taken out (None: none is kept)."""
        copy = self._copies.pop(key, None)
        if copy is not None:
            self.bytes_kept -= self._size_of(copy)
        return copy

    def keep(self, key: K, copy: V) -> None:
        """Keeps the copy as the most recently used, dropping the least recently used ones past the
        bound; one larger than the bound is not kept."""
        size = self._size_of(copy)
        if size > self.limit_bytes:
            return
        self._copies[key] = copy
        self.bytes_kept += size
        while self.bytes_kept > self.limit_bytes:
            _, oldest = self._copies.popitem(last=False)
            self.bytes_kept -= self._size_of(oldest)

"""What the `web_search` tool asks of a search backend: the results of one query, each an address,
a title and a passage, best first. A backend that is down, slow or answers something else raises
SearchFailed, with a reason that names no address or credential of the backend (the model and
the logs read it)."""

from __future__ import annotations

from typing import Protocol

from app.protocol.shapes import Item


class SearchFailed(Exception):
    pass


class SearchBackend(Protocol):
    async def search(self, query: str) -> list[Item]:
        """The results (`url`, `title`, `snippet`), best first."""
        ...

    async def close(self) -> None: ...

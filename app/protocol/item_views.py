"""A stored item as a client reads it back (input_items, a conversation's items): as its client
sent it (input_files.as_listed), and a search's results only where the read's `include` asks for
them (search_results)."""

from __future__ import annotations

from collections.abc import Collection

from app.protocol.input_files import as_listed
from app.protocol.search_results import item_shown
from app.protocol.shapes import Item


def as_shown(item: Item, include: Collection[str]) -> Item:
    listed = as_listed(item)
    return item_shown(listed, include)

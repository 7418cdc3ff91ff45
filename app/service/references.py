"""`item_reference` input items (`{"type": "item_reference", "id": …}`, or `{"id": …}` alone):
each is replaced by the item it names, one the caller's account has stored (an input or output
item of a stored response, or an item created in a conversation), before anything else reads the
input. The item then belongs to this input as if the client had sent it again: it is listed by
`input_items` as itself (with its own id, as every sent item gets one). An unknown id, another
account's, or one of a `store: false` response (never stored) is a 400 naming it."""

from __future__ import annotations

from app import errors
from app.protocol.shapes import Item
from app.service.state import AppState
from app.storage import items as items_db


async def resolve_references(state: AppState, account_id: str, items: list[Item], param: str = "input") -> None:
    named = {item["id"] for item in items if item["type"] == "item_reference"}
    if not named:
        return
    async with state.engine.connect() as conn:
        found = await items_db.held_by(conn, account_id, sorted(named))
    for index, item in enumerate(items):
        if item["type"] != "item_reference":
            continue
        held = found.get(item["id"])
        if held is None:
            where = f"{param}[{index}].id"
            raise errors.InvalidRequest(
                f"Invalid '{where}': item with id '{item['id']}' not found.", param=where, code="invalid_value"
            )
        items[index] = dict(held)

"""Reading a response: as it is now (a running one with its output so far), its input items page
by page, and its event stream replayed from any point (resume)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from app import errors
from app.events.follow import follow
from app.protocol.create_request import check_include
from app.protocol.encoding import WireEvent
from app.protocol.item_views import as_shown
from app.protocol.pages import listed
from app.protocol.response_object import ResponseRecord
from app.protocol.search_results import events_shown
from app.service.state import AppState
from app.storage import events as events_db
from app.storage import items as items_db
from app.storage import responses as responses_db
from app.storage.events import LogPage


async def retrieve(state: AppState, account_id: str, response_id: str) -> ResponseRecord:
    async with state.engine.connect() as conn:
        record = await responses_db.get_record(conn, response_id, account_id)
        if record is not None and record.status == "in_progress":  # its output so far, from its log
            record = record.evolve(output=await events_db.output_so_far(conn, response_id))
            await conn.commit()  # the snapshot it may have saved
    if record is None:
        raise errors.response_not_found(response_id)
    return record


async def resume(
    state: AppState, account_id: str, response_id: str, after: int
) -> AsyncIterator[list[WireEvent] | None]:
    """The response's events after `after`, replayed from its log, then live until its end. Its
    first page is read here, before the client is answered: a follower that cannot be served is
    refused with a status (404, 400, 503), never by an error event after a 200. Followers that
    arrive together share that read (app/events/log_reader.py): a burst needs no connection each."""
    subscription = await state.hub.subscribe(response_id, durable=True)  # first: nothing is missed
    try:
        page = await state.log_reader.read(response_id, after)
        _check_resumable(state, account_id, response_id, page)
    except BaseException:
        await subscription.close()
        raise
    return events_shown(follow(state.log_source(True), subscription, response_id, after, first_page=page), page.include)


async def follow_any(state: AppState, response_id: str, after: int) -> AsyncIterator[list[WireEvent] | None]:
    """An operator's follow (the console): any account's response, in whatever mode it was made,
    from after `after`, replayed then live until its end; a 404 for none, a 400 once its log is gone."""
    subscription = await state.hub.subscribe(response_id, durable=True)
    try:
        page = await state.log_reader.read(response_id, after)
        if not page.found:
            raise errors.response_not_found(response_id)
        if page.events_purged:
            raise errors.InvalidRequest("This response's events are no longer kept.", param="stream")
    except BaseException:
        await subscription.close()
        raise
    return follow(state.log_source(True), subscription, response_id, after, first_page=page)


async def replay(state: AppState, account_id: str, response_id: str) -> AsyncIterator[list[WireEvent] | None]:
    """The response's events from its first, then live until its end, whatever mode it was
    created in (an Idempotency-Key's create sent again); a 400 once its log is gone."""
    subscription = await state.hub.subscribe(response_id, durable=True)
    try:
        page = await state.log_reader.read(response_id, -1)
        if not page.found or page.account_id != account_id:
            raise errors.response_not_found(response_id)
        if page.events_purged:
            raise errors.InvalidRequest(
                "This response's stream is no longer kept: retrieve it instead.", param="stream"
            )
    except BaseException:
        await subscription.close()
        raise
    return follow(state.log_source(True), subscription, response_id, -1, first_page=page)


def _check_resumable(state: AppState, account_id: str, response_id: str, page: LogPage) -> None:
    if not page.found or page.account_id != account_id:
        raise errors.response_not_found(response_id)
    for flag, how in ((page.background, "background=true"), (page.stream, "stream=true")):
        if not flag:
            raise errors.InvalidRequest(
                f"This response cannot be streamed because it was not created with {how}.",
                param="stream",
                code="invalid_request_error",
            )
    window = state.settings.stream_log_hours
    if page.events_purged or (page.completed_at and page.completed_at < time.time() - window * 3600):
        raise errors.InvalidRequest(
            f"This response can no longer be streamed because it ended more than {window:g} hours ago.",
            param="stream",
            code="invalid_request_error",
        )


async def input_items(
    state: AppState,
    account_id: str,
    response_id: str,
    *,
    order: Literal["asc", "desc"],
    limit: int,
    after: str | None,
    before: str | None,
    include: list[str] | None = None,
) -> dict[str, Any]:
    include = include or []
    check_include(include)
    async with state.engine.connect() as conn:
        response = await responses_db.get_row(conn, response_id, account_id)
        if response is None:
            raise errors.response_not_found(response_id)
        cursors: dict[str, items_db.Key | None] = {}
        for name, item_id in (("after", after), ("before", before)):
            found = None if item_id is None else await items_db.find_input_item(conn, response, item_id)
            if item_id is not None and found is None:
                raise errors.InvalidRequest(
                    f"Invalid '{name}': no input item with id '{item_id}' in response '{response_id}'.",
                    param=name,
                    code="invalid_value",
                )
            cursors[name] = found
        page = await items_db.input_items_page(
            conn, response, order=order, limit=limit, after=cursors["after"], before=cursors["before"]
        )
    return listed([as_shown(item, include) for item in page.data], page.has_more)

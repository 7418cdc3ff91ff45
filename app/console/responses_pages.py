"""The responses: the list (filtered, newest first, page by page) and one response (its settings,
chain, items, usage, error and timeline; live while it runs, followed by static/live.js; cancel)."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp

from app import errors
from app.console import guard
from app.console.guard import checked_form, session_of, state_of
from app.console.item_views import item_view
from app.console.rendering import TEMPLATES, page, path_id
from app.console.timeline import timeline
from app.events.sse import EventStreamResponse
from app.protocol.encoding import WireEvent
from app.protocol.vocabulary import ACTIVE_STATUSES, STATUSES
from app.service import reading, stopping
from app.storage import console as console_db
from app.storage.console import ResponseFilters


@page
async def responses_list(request: Request) -> Response:
    session = await session_of(request)
    filters = _filters(request)
    async with state_of(request).engine.connect() as conn:
        listed, next_cursor = await console_db.list_responses(conn, filters)
    query = {k: v for k, v in request.query_params.items() if k != "before" and v}
    if next_cursor is not None:
        query["before"] = f"{next_cursor[0].isoformat()}|{next_cursor[1]}"
    context = {
        "session": session,
        "responses": listed,
        "filters": request.query_params,
        "statuses": STATUSES,
        "next_query": query if next_cursor is not None else None,
    }
    return TEMPLATES.TemplateResponse(request, "responses.html", context)


@page
async def response_page(request: Request) -> Response:
    session = await session_of(request)
    response_id = path_id(request, "response_id")
    async with state_of(request).engine.connect() as conn:
        detail = await console_db.response_detail(conn, response_id)
        steered = await console_db.steered_at(conn, response_id) if detail is not None else []
    if detail is None:
        raise errors.response_not_found(response_id)
    row = detail.row
    context = {
        "session": session,
        "row": row,
        "account": detail.account,
        "settings": row.settings,
        "input_items": [item_view(item) for item in detail.input_items],
        "output_items": [item_view(item) for item in detail.output_items],
        "continued_by": detail.continued_by,
        "timeline": timeline(row, detail.events, steered, datetime.now(UTC)),
        "active": row.status in ACTIVE_STATUSES,
        "last_event": detail.events[-1].sequence_number if detail.events else -1,
    }
    return TEMPLATES.TemplateResponse(request, "response.html", context)


@page
async def cancel(request: Request) -> Response:
    await checked_form(request, await session_of(request))
    response_id = path_id(request, "response_id")
    await stopping.cancel_any(state_of(request), response_id)
    return RedirectResponse(f"{guard.PATH}/responses/{response_id}", status_code=303)


@page
async def response_events(request: Request) -> Response | ASGIApp:
    """The response's events after `starting_after`, replayed then live, for static/live.js."""
    await session_of(request)
    after = request.query_params.get("starting_after", "-1")
    events = await reading.follow_any(
        state_of(request), path_id(request, "response_id"), int(after) if after.lstrip("-").isdigit() else -1
    )
    return EventStreamResponse(events, obfuscate=False, on_error=_error_event)


def _error_event(error: errors.APIError) -> WireEvent:
    return WireEvent.of({"type": "error", "error": error.body()["error"]})


def _filters(request: Request) -> ResponseFilters:
    """The list's filters from its query; a value that does not parse is ignored, as a form field
    left empty (and a NUL, which no Postgres text holds, is dropped)."""
    query = {name: value.replace("\x00", "") for name, value in request.query_params.items()}
    metadata = None
    if "=" in query.get("metadata", ""):
        key, _, value = query["metadata"].partition("=")
        metadata = (key.strip(), value.strip())
    before = None
    if "|" in query.get("before", ""):
        at, _, last_id = query["before"].partition("|")
        parsed = _time(at)
        before = (parsed, last_id) if parsed is not None else None
    return ResponseFilters(
        account=query.get("account") or None,
        model=query.get("model") or None,
        status=query.get("status") if query.get("status") in STATUSES else None,
        created_from=_time(query.get("from", "")),
        created_to=_time(query.get("to", "")),
        metadata=metadata,
        id_prefix=query.get("id") or None,
        before=before,
    )


def _time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@page
async def conversation_page(request: Request) -> Response:
    session = await session_of(request)
    conversation_id = path_id(request, "conversation_id")
    async with state_of(request).engine.connect() as conn:
        found = await console_db.conversation_detail(conn, conversation_id)
    if found is None:
        raise errors.NotFound(f"No conversation with id '{conversation_id}'.")
    context = {
        "session": session,
        "conversation": found,
        "items": [item_view(item) for item in found.items],
    }
    return TEMPLATES.TemplateResponse(request, "conversation.html", context)

"""A create request checked in full (`validated`: a 400 naming what is wrong, with its model;
sealed reasoning opened, image URLs fetched, files read), and the response it makes (`new_record`)."""

from __future__ import annotations

import logging
import time
from typing import Any

from app import errors
from app.catalog import ModelEntry
from app.process.metrics import HOSTED_TOOLS_NOT_OFFERED
from app.protocol.create_request import ValidatedCreate, echoed_settings, parse_create_request
from app.protocol.ids import new_id
from app.protocol.input_items import image_count
from app.protocol.model_fit import check_fit
from app.protocol.response_object import ResponseRecord
from app.protocol.sealing import open_sealed_items
from app.protocol.shapes import Tool
from app.protocol.tools import HOSTED_TOOL_TYPES, served_kind
from app.service.file_inputs import read_input_files
from app.service.image_fetch import check_images
from app.service.references import resolve_references
from app.service.state import AppState
from app.storage import vector_stores as stores_db

log = logging.getLogger(__name__)


async def validated(
    state: AppState, account_id: str, body: dict[str, Any], *, input_optional: bool = False
) -> tuple[ValidatedCreate, ModelEntry]:
    """A create request's body checked in full (a 400 naming what is wrong), with its model;
    sealed reasoning opened, image URLs fetched, files read."""
    create = parse_create_request(
        body,
        state.settings.hosted_tools,
        input_optional=input_optional,
        mcp=state.mcp_policy,
        served=await _served(state, body),
    )
    if create.mcp_credentials and state.seal is None:
        raise errors.InvalidRequest(
            "Invalid 'tools': an MCP tool's authorization and headers travel sealed to the worker "
            "that calls its server, and this server has no encryption key (RESPONSES_ENCRYPTION_KEYS).",
            param="tools",
            code="mcp_credentials_unavailable",
        )
    if create.request.context_management and state.seal is None:
        raise errors.InvalidRequest(
            "Invalid 'context_management': compaction needs an encryption key on this server "
            "(RESPONSES_ENCRYPTION_KEYS): the summary is sealed with it.",
            param="context_management",
            code="compaction_unavailable",
        )
    await resolve_references(state, account_id, create.input_items)
    open_sealed_items(create.input_items, state.seal)
    model = state.catalog.resolve(create.request.model)
    check_fit(create, model)
    await check_images(create.input_items, state.urls)
    page_images = max(model.max_images - image_count(create.input_items), 0)
    await read_input_files(state, account_id, create.input_items, page_images=page_images)
    if create.runs_file_search:
        await check_vector_stores(state, account_id, create.tools)
    return create, model


async def _served(state: AppState, body: dict[str, Any]) -> set[str]:
    """The hosted tools this server runs, of those the request lists: file_search with pgvector
    and an embedding model, web_search with a search backend configured."""
    tools = body.get("tools")
    asked = {served_kind(t.get("type")) for t in tools if isinstance(t, dict)} if isinstance(tools, list) else set()
    served = set()
    if "web_search" in asked and state.settings.web_search_url:
        served.add("web_search")
    if "file_search" in asked and state.catalog.embedding_models and await state.check_pgvector() is not None:
        served.add("file_search")
    return served


async def check_vector_stores(state: AppState, account_id: str, tools: list[Tool]) -> None:
    """The file_search tool searches only stores of the caller's: another's, or an unknown one, is a 404."""
    for index, tool in enumerate(tools):
        if tool["type"] != "file_search":
            continue
        async with state.engine.connect() as conn:
            found = {store.id for store in await stores_db.get_many(conn, account_id, tool["vector_store_ids"])}
        for position, store_id in enumerate(tool["vector_store_ids"]):
            if store_id not in found:
                raise errors.NotFound(
                    f"No vector store found with id '{store_id}'.",
                    param=f"tools[{index}].vector_store_ids[{position}]",
                )


def log_hosted_tools(create: ValidatedCreate) -> None:
    """Hosted tools kept from the model (RESPONSES_HOSTED_TOOLS=ignore): logged and counted, so it
    is no secret."""
    hosted = [
        tool["type"]
        for tool in create.tools
        if tool["type"] in HOSTED_TOOL_TYPES
        and not (tool["type"] == "mcp" and create.runs_mcp)
        and not (tool["type"] == "file_search" and create.runs_file_search)
        and not (served_kind(tool["type"]) == "web_search" and create.runs_web_search)
    ]
    if hosted:
        log.info("hosted tools not offered to the model: %s", ", ".join(hosted))
    for kind in hosted:
        HOSTED_TOOLS_NOT_OFFERED.labels(kind).inc()


def new_record(
    create: ValidatedCreate, model: ModelEntry, *, compaction: bool = False, account_id: str | None = None
) -> ResponseRecord:
    """`account_id`: whose response it is: the worker's file searches are scoped by it (as every
    query is), and so is its `prompt_cache_key` (app/queue/placement.py)."""
    request = create.request
    settings = echoed_settings(create, request.max_output_tokens, model.sampling)
    if compaction:
        settings["compaction"] = True
    # What the client actually set, for the runtime request (defaults stay the runtime's).
    settings["requested"] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "sampling": request.sampling(),
        "include": request.include or [],
        "logprobs": create.logprobs,
        "runs_mcp": create.runs_mcp,
        "runs_file_search": create.runs_file_search,
        "runs_web_search": create.runs_web_search,
        # The server searches the deferred tools (a tool_search tool of server execution).
        "runs_tool_search": any(t["type"] == "tool_search" and t["execution"] == "server" for t in create.tools),
        "account_id": account_id,
    }
    return ResponseRecord(
        id=new_id("resp"),
        model=model.id,
        status="queued",
        created_at=time.time(),
        instructions=request.instructions,
        previous_response_id=request.previous_response_id,
        settings=settings,
        metadata=request.metadata or {},
        store=create.store,
        background=create.background,
        stream=create.stream,
    )

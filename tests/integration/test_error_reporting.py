"""What a client is told when a stream or a JSON answer fails after the request was accepted:
our errors as they are (never turned into a 500 by the task group they were raised in), an
outage as a 503, and anything unexpected as "internal error" with the request id only, its
details in the log under that id. Driven through the API's own middleware and response classes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp

from app import errors
from app.api import middleware
from app.api.app import _api_error
from app.api.routes.responses import _error_event
from app.events.final_response import FinalResponse
from app.events.sse import EventStreamResponse
from app.protocol.encoding import WireEvent

SECRET_SQL = "SELECT payload FROM response_events WHERE response_id = 'resp_secret'"


def failing(exc: Exception) -> AsyncIterator[list[WireEvent] | None]:
    async def events() -> AsyncIterator[list[WireEvent] | None]:
        yield [WireEvent(0, "response.created", '{"type":"response.created","sequence_number":0}')]
        raise exc

    return events()


async def nothing() -> None:
    pass


def app_failing_with(exc: Exception) -> httpx.AsyncClient:
    async def stream(request: Request) -> ASGIApp:
        return EventStreamResponse(failing(exc), obfuscate=False, on_error=_error_event)

    async def final(request: Request) -> ASGIApp:
        return FinalResponse(failing(exc), nothing)

    app = Starlette(
        routes=[Route("/stream", stream), Route("/final", final)],
        exception_handlers={errors.APIError: _api_error},
    )
    middleware.install(app)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def error_event(answer: httpx.Response) -> dict[str, object]:
    frames = answer.text.strip().split("\n\n")
    assert frames[0].startswith("event: response.created")
    event, data = frames[-1].split("\n")
    assert event == "event: error"
    return httpx.Response(200, content=data.removeprefix("data: ")).json()  # type: ignore[no-any-return]


async def test_an_unexpected_error_in_a_stream_tells_only_the_request_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    async with app_failing_with(RuntimeError(SECRET_SQL)) as client:
        answer = await client.get("/stream")
    request_id = answer.headers["x-request-id"]
    assert error_event(answer)["error"] == {
        "message": f"internal error (request {request_id})",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert SECRET_SQL not in answer.text
    assert any(request_id in r.getMessage() and r.exc_info and SECRET_SQL in str(r.exc_info[1]) for r in caplog.records)


async def test_an_outage_in_a_stream_is_told_as_unavailable() -> None:
    async with app_failing_with(OperationalError(SECRET_SQL, {"id": "resp_secret"}, Exception("gone"))) as client:
        answer = await client.get("/stream")
    error = error_event(answer)["error"]
    assert isinstance(error, dict) and error["message"] == errors.ServiceUnavailable().message
    assert "resp_secret" not in answer.text


async def test_our_error_in_a_stream_is_told_as_it_is() -> None:
    async with app_failing_with(errors.GenerationFailed("the worker went away")) as client:
        answer = await client.get("/stream")
    error = error_event(answer)["error"]
    assert isinstance(error, dict) and error["message"] == "the worker went away"


@pytest.mark.parametrize(
    ("exc", "status", "message"),
    [
        (errors.GenerationFailed("the worker went away"), 502, "the worker went away"),
        (OperationalError(SECRET_SQL, {}, Exception("gone")), 503, errors.ServiceUnavailable().message),
        (RuntimeError(SECRET_SQL), 500, "internal error (request {request_id})"),
    ],
)
async def test_a_json_answer_that_fails_while_waiting_keeps_its_status(
    exc: Exception, status: int, message: str
) -> None:
    """The error is raised inside the answer's task group: it reaches the handlers as itself,
    not as an ExceptionGroup (which would be a 500 for every one of them)."""
    async with app_failing_with(exc) as client:
        answer = await client.get("/final")
    assert answer.status_code == status
    assert answer.json()["error"]["message"] == message.format(request_id=answer.headers["x-request-id"])
    assert SECRET_SQL not in answer.text

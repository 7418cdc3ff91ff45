"""One exception tree for everything a client can be told, rendered as OpenAI's error envelope.

    APIError (500 server_error)
    ├── InvalidRequest (400 invalid_request_error)
    │   ├── UnsupportedParameter (400, code unsupported_parameter)
    │   ├── NotFound (404)
    │   ├── Conflict (409)
    │   ├── PayloadTooLarge (413)
    │   └── UnsupportedMediaType (415)
    ├── AuthenticationFailed (401, code invalid_api_key)
    ├── ServiceUnavailable (503)
    ├── RateLimited (429 rate_limit_exceeded or queue_full: app/service/admission.py)
    ├── GenerationFailed (502: the model runtime failed a foreground response)
    │   └── FollowLost (its events could not be followed to the end: app/events/log_sources.py)
    └── ExternalConnectorFailed (424: an MCP server's tools could not be listed)

Each class's docstring is its default message.
"""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """The server had an error while processing your request."""

    status_code = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str | None = None, *, param: str | None = None, code: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.param = param
        self.extra_headers: dict[str, str] = {}
        if code is not None:
            self.code = code
        super().__init__(self.message)

    def add_headers(self, headers: dict[str, str]) -> None:
        """Headers its answer carries too (the rate limits of the create it ended)."""
        self.extra_headers.update(headers)

    def answer_headers(self) -> dict[str, str]:
        """Every header its answer carries: its own kind's (`headers`), then those added."""
        return {**self.headers(), **self.extra_headers}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(APIError):
    """Invalid request."""

    status_code = 400
    type = "invalid_request_error"


class UnsupportedParameter(InvalidRequest):
    """A parameter (or value) that OpenAI accepts and this server does not serve yet."""

    code = "unsupported_parameter"

    def __init__(self, param: str, what: str, why: str | None = None) -> None:
        reason = f": {why}" if why else " yet"
        super().__init__(
            f"Unsupported parameter '{param}': {what} is not supported by this server{reason}.", param=param
        )


class NotFound(InvalidRequest):
    """Not found."""

    status_code = 404


class Conflict(InvalidRequest):
    """The request conflicts with an earlier one."""

    status_code = 409


class PayloadTooLarge(InvalidRequest):
    """The request body is too large."""

    status_code = 413

    def headers(self) -> dict[str, str]:
        # The connection closes after the answer: the server reads no more of a body it refused.
        return {"connection": "close"}


class UnsupportedMediaType(InvalidRequest):
    """The request body must be JSON (Content-Type: application/json)."""

    status_code = 415


class AuthenticationFailed(APIError):
    """Incorrect API key provided."""

    status_code = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class ServiceUnavailable(APIError):
    """The service is temporarily unavailable; please retry."""

    status_code = 503
    retry_after_seconds = 1  # an outage or a full pool: soon over, or the client backs off further

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_seconds)}


class GenerationFailed(APIError):
    """The model runtime failed to generate a response."""

    status_code = 502


class ExternalConnectorFailed(APIError):
    """An MCP server this response needs could not be reached (OpenAI's 424 for it)."""

    status_code = 424
    type = "external_connector_error"


def internal_error(request_id: str) -> APIError:
    return APIError(f"internal error (request {request_id})")


def response_not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.")


def conversation_not_found(conversation_id: str, param: str | None = None) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


def conversation_locked() -> InvalidRequest:
    """OpenAI's words for a second response (or items) on a conversation a response runs on."""
    return InvalidRequest(
        "Another process is currently operating on this conversation. Please retry in a few seconds.",
        param="conversation",
        code="conversation_locked",
    )

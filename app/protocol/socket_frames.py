"""WebSocket mode's frames (../shared/reference/websocket-mode.md): one JSON object per text frame
each way. A client frame is read into an event with its `type` and lane (`stream_id`); a server
frame is a stream event as SSE carries it, with the lane of the create it answers, or an `error`
that carries its HTTP status (Codex maps `status` to its HTTP error handling)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app import errors
from app.protocol.encoding import WireEvent

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")


@dataclass(frozen=True)
class ClientEvent:
    type: str
    body: dict[str, Any]  # the frame less `type`
    stream_id: str | None  # the lane; None is the default lane
    size: int  # the frame's, in bytes


def read_frame(text: str | None) -> ClientEvent:
    """The event a text frame carries (a 400 naming what is wrong otherwise; `None`: a binary frame)."""
    if text is None:
        raise errors.InvalidRequest(
            "Binary frames are not supported: send each event as a JSON text frame.", code="invalid_json"
        )
    size = len(text.encode())
    try:
        frame = json.loads(text)
    except ValueError:
        raise errors.InvalidRequest("The frame is not valid JSON.", code="invalid_json") from None
    if not isinstance(frame, dict):
        raise errors.InvalidRequest("A frame must be a JSON object.", code="invalid_json")
    kind = frame.pop("type", None)
    if not isinstance(kind, str):
        raise errors.InvalidRequest(
            "Missing required parameter: 'type'.", param="type", code="missing_required_parameter"
        )
    stream_id = frame.pop("stream_id", None)
    if stream_id is not None and (not isinstance(stream_id, str) or not STREAM_ID.fullmatch(stream_id)):
        raise errors.InvalidRequest(
            "The 'stream_id' field must be a non-empty string with at most 256 characters of letters, "
            "digits, '_', '.' and '-'.",
            param="stream_id",
            code="invalid_stream_id",
        )
    return ClientEvent(kind, frame, stream_id, size)


def stream_frame(event: WireEvent, stream_id: str | None) -> str:
    """A stream event as the socket sends it: its SSE JSON, with the lane of its create if it had one."""
    if stream_id is None:
        return event.json
    return f'{event.json[:-1]},"stream_id":{json.dumps(stream_id)}}}'


def error_frame(error: errors.APIError, stream_id: str | None = None) -> str:
    frame: dict[str, Any] = {"type": "error", "status": error.status_code, **error.body()}
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return json.dumps(frame)

"""An HTTP proxy in front of a real model server that keeps the body of every request it passes
on: what the worker sent vLLM (a continuation's messages and flags) can then be checked, while
vLLM itself answers. Streams are passed on chunk by chunk, as they come.

Run: python -m tests.vllm.recording_proxy --port 9200 --upstream http://127.0.0.1:8400
GET /_requests lists the JSON bodies received, in order; DELETE /_requests clears them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

received: list[dict[str, Any]] = []
upstream = httpx.AsyncClient(timeout=None)
UPSTREAM = ""


async def requests_view(request: Request) -> Response:
    if request.method == "DELETE":
        received.clear()
    return JSONResponse(received)


async def forward(request: Request) -> Response:
    body = await request.body()
    if body:
        received.append({"path": request.url.path, **json.loads(body)})
    sent = upstream.build_request(
        request.method,
        f"{UPSTREAM}{request.url.path}",
        content=body,
        headers={"content-type": request.headers.get("content-type", "application/json")},
    )
    answer = await upstream.send(sent, stream=True)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        finally:
            await answer.aclose()  # a client gone early closes vLLM's stream too, so vLLM aborts

    media_type = answer.headers.get("content-type")
    return StreamingResponse(chunks(), status_code=answer.status_code, media_type=media_type)


app = Starlette(
    routes=[
        Route("/_requests", requests_view, methods=["GET", "DELETE"]),
        Route("/_stats", lambda _: JSONResponse({"requests": len(received)})),
        Route("/{path:path}", forward, methods=["GET", "POST"]),
    ]
)


def main() -> None:
    global UPSTREAM
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    UPSTREAM = args.upstream.rstrip("/")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

"""A scripted model runtime that speaks OpenAI Chat Completions (streaming) over HTTP.

By default it answers "Echo: <last user message>", one word per chunk. A user message whose
first line is `#fake {json}` scripts it instead:

    text / chunks      the answer, as words or as explicit chunks; asked to continue an answer
                       (`continue_final_message`, or a trailing assistant message to a model whose
                       name holds "prefill"), the chunks after the answer so far
    filler             {"bytes": N, "chunk_bytes": M}: an answer of N bytes of letters in chunks of
                       M (a very large answer without a very large request)
    delay, first_delay seconds between chunks of output (reasoning, text, a call's parts) / before the
                       first one; chunk n is due `n · delay` after the first, on a clock of its own,
                       as a GPU's steps come: a loop busy elsewhere sends a chunk late, not every
                       later one
    drift              sleep `delay` after each chunk instead, so that lateness adds up
    finish_reason      what the last chunk says (default "stop"; "length" when max_tokens cuts)
    status             answer this HTTP status with an error body instead of streaming
    fail_times         ... only for the first this many requests with the same script
    error_after        send an in-stream error after this many chunks
    error_message      its message (default "scripted mid-stream failure")
    break_after        drop the connection after this many chunks
    no_usage           send no usage chunk
    usage              send this as the usage chunk's `usage`, instead of the counts
    context_window     refuse (400) when prompt words + max_tokens exceed it, worded as vLLM before 0.12
                       words it (`context_wording`: "vllm", "sglang", "llamacpp", "plain": without counts;
                       "vllm-0.32": as vLLM 0.32 does, max_tokens shortened to fit and only a prompt
                       that leaves no room refused, with a lower bound of its length)
    reasoning          reasoning text streamed (as `reasoning_content`, word by word) before the answer
    tool_calls         [{"name", "arguments", "id"?}]: calls streamed after the text (ids call_0, call_1…
                       unless given), finish_reason "tool_calls"
    (logprobs)         not scripted: a request asking for them gets them on every text chunk
    then               the script to follow once the conversation ends with a tool's result (an
                       agent loop: call a tool, then answer); after the n-th round of calls of
                       the turn, the n-th nested `then` (or the deepest there is)

GET /_requests lists the request bodies it received; GET /_stats counts streams that clients
closed early (an aborted generation), the Authorization header and arrival time of each request
and the server's pid; DELETE /_requests clears them.
GET /_files/{name} serves test images (dot.png, a 1x1 PNG; text, not an image) and a document
(report, a PDF) and counts the
requests for them in /_stats; GET /_redirect?to=URL answers 302 to URL.
GET /v1/models answers as a model server's health check does; POST /tokenize counts the words of
chat messages and tools as vLLM's counts their tokens.

Run: python -m tests.fake_runtime --port 9100
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.documents import pdf

received: list[dict[str, Any]] = []
failures: dict[str, int] = {}  # requests seen per script, for fail_times
received_tokenize: list[dict[str, Any]] = []
authorizations: list[str | None] = []  # the Authorization header of each chat request
arrivals: list[float] = []  # when each chat request arrived (time.time(): bench/mcp_benchmark.py)
stats: dict[str, float] = {
    "streams_started": 0,
    "streams_finished": 0,
    "streams_aborted": 0,
    "last_abort_at": 0.0,
    "files_served": 0,
}


def _script(body: dict[str, Any]) -> dict[str, Any]:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    last = users[-1]["content"] if users else ""
    if isinstance(last, list):  # text and image parts
        last = "".join(part.get("text", "") for part in last)
    first_line = last.split("\n", 1)[0]
    if first_line.startswith("#fake "):
        script: dict[str, Any] = json.loads(first_line[len("#fake ") :])
        messages = body.get("messages") or [{}]
        if _continued_from(body):  # an answer being continued: the script of the answer it continues
            messages = messages[:-1]
        if messages[-1].get("role") == "tool":  # the n-th tool result of this turn: the n-th `then`
            user_at = max(i for i, m in enumerate(messages) if m.get("role") == "user")
            rounds = sum(1 for m in messages[user_at:] if m.get("role") == "assistant" and m.get("tool_calls"))
            for _ in range(rounds):
                if "then" not in script:
                    break
                script = script["then"]
        return script
    return {"text": f"Echo: {last}"}


def _chunks(script: dict[str, Any]) -> list[str]:
    if "chunks" in script:
        return list(script["chunks"])
    if "filler" in script:
        return _filler(script["filler"]["bytes"], script["filler"]["chunk_bytes"])
    if "tool_calls" in script and "text" not in script:
        return []
    return _words(script.get("text", ""))


def _continued_from(body: dict[str, Any]) -> str:
    """The answer so far, when asked to continue it (vLLM's `continue_final_message`, or a server
    that continues a trailing assistant message by itself: `prefill` models)."""
    messages = body.get("messages") or [{}]
    if messages[-1].get("role") != "assistant" or not (body.get("continue_final_message") or PREFILL in body["model"]):
        return ""
    return str(messages[-1].get("content") or "")


PREFILL = "prefill"  # a model whose upstream name says so continues a trailing assistant message itself


def _after(chunks: list[str], prefix: str) -> list[str]:
    """The chunks of an answer that come after `prefix`, its beginning: where the answer so far
    ends at a chunk's end, the chunks after it, as the same run would have gone on."""
    written = ""
    for index, chunk in enumerate(chunks):
        if written == prefix:
            return chunks[index:]
        written += chunk
    rest = "".join(chunks)[len(prefix) :] if "".join(chunks).startswith(prefix) else ""
    return [rest] if rest else []


def _filler(size: int, chunk_bytes: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    text = (letters * (size // len(letters) + 1))[:size]
    return [text[start : start + chunk_bytes] for start in range(0, size, chunk_bytes)]


def _words(text: str) -> list[str]:
    return [w if i == 0 else " " + w for i, w in enumerate(text.split(" ")) if w or (i == 0 and text)]


def _logprobs(text: str, index: int, top: int) -> dict[str, Any]:
    """As vLLM reports a token's log probability (each chunk one token here): the chosen one
    at -0.1 per position, the `top` likeliest with the chosen first."""

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    chosen = entry(text, -0.1 * index)
    return {"content": [{**chosen, "top_logprobs": [chosen, *(entry(f"alt{n}", -5.0 - n) for n in range(top - 1))]}]}


def _call_deltas(index: int, call: dict[str, Any]) -> list[dict[str, Any]]:
    """As OpenAI streams a call: id, type and name first, then the arguments in pieces."""
    arguments = call["arguments"]
    half = len(arguments) // 2
    first = {
        "index": index,
        "id": call.get("id", f"call_{index}"),
        "type": "function",
        "function": {"name": call["name"], "arguments": ""},
    }
    return [first] + [
        {"index": index, "function": {"arguments": part}} for part in (arguments[:half], arguments[half:])
    ]


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, logprobs: dict[str, Any] | None = None) -> str:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    payload = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    return f"data: {json.dumps(payload)}\n\n"


async def chat_completions(request: Request) -> Response:
    arrivals.append(time.time())
    body = await request.json()
    received.append(body)
    authorizations.append(request.headers.get("authorization"))
    script = _script(body)
    key = json.dumps(script, sort_keys=True)
    failures[key] = failures.get(key, 0) + 1
    if "status" in script and failures[key] <= script.get("fail_times", failures[key]):
        return JSONResponse(
            {"error": {"message": "scripted failure", "type": "server_error"}}, status_code=script["status"]
        )
    chunks = _after(_chunks(script), _continued_from(body))
    limit = body.get("max_tokens")
    finish = script.get("finish_reason", "tool_calls" if script.get("tool_calls") else "stop")
    prompt = prompt_tokens(body)
    window = script.get("context_window", 1_000_000)
    wording = script.get("context_wording", "vllm")
    if limit is not None and wording == "vllm-0.32" and prompt < window:
        limit = min(limit, window - prompt)  # it shortens max_tokens itself
    if limit is not None and prompt + limit > window:
        message = _overflow(wording, prompt, limit, window)
        return JSONResponse({"error": {"message": message, "type": "BadRequestError"}}, status_code=400)
    if limit is not None and len(chunks) > limit:
        chunks, finish = chunks[:limit], "length"
    return StreamingResponse(_stream(body, chunks, finish, script, prompt), media_type="text/event-stream")


IMAGE_TOKENS = 85  # what an image weighs in a prompt, whatever its size
THINKING_OFF_TOKENS = 4  # the empty think block a template writes with enable_thinking false (Qwen3's)


def prompt_tokens(body: dict[str, Any]) -> int:
    """As a chat template renders the prompt and vLLM counts it (in usage and at /tokenize) alike:
    one token per word of every message's text and of the tools' JSON (the template lists their
    signatures), IMAGE_TOKENS per image, and the template's switches (THINKING_OFF_TOKENS)."""
    words = sum(_content_tokens(m.get("content")) for m in body.get("messages", []))
    words += len(json.dumps(body["tools"]).split()) if body.get("tools") else 0
    thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
    return words + (THINKING_OFF_TOKENS if thinking is False else 0)


def _content_tokens(content: Any) -> int:
    if not isinstance(content, list):
        return len(str(content or "").split())
    return sum(
        IMAGE_TOKENS if part.get("type") == "image_url" else len(str(part.get("text", "")).split()) for part in content
    )


def _overflow(wording: str, prompt: int, limit: int, window: int) -> str:
    """A context overflow as each server words it."""
    return {
        # 0.12 and later: only a prompt that leaves no room is refused, and the count it states is
        # a lower bound (it stops counting one past the window).
        "vllm-0.32": f"This model's maximum context length is {window} tokens. However, your prompt contains at "
        f"least {window + 1} input tokens, which exceeds this limit even without any output tokens. Please reduce "
        f"the length of the input prompt. (parameter=input_tokens, value={window + 1})",
        "vllm": f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + limit} tokens ({prompt} in the messages, {limit} in the completion). "
        "Please reduce the length of the messages or completion.",
        "sglang": f"The input ({prompt} tokens) is longer than the model's context length ({window} tokens).",
        "llamacpp": f"request ({prompt} tokens) exceeds the available context size ({window} tokens)",
        "plain": "This model's maximum context length is exceeded.",
    }[wording]


async def _stream(
    body: dict[str, Any], chunks: list[str], finish: str, script: dict[str, Any], prompt_tokens: int
) -> AsyncIterator[str]:
    model = body.get("model", "")
    stats["streams_started"] += 1
    try:
        yield _chunk(model, {"role": "assistant", "content": ""})
        await asyncio.sleep(script.get("first_delay", 0))
        delay, clock, step = script.get("delay", 0), time.perf_counter(), 0

        async def paced() -> None:
            """Waits for the next chunk of output (reasoning, text or a call's part): the n-th is
            due `n · delay` after the first."""
            nonlocal step
            if step:
                due = delay if script.get("drift") else clock + step * delay - time.perf_counter()
                await asyncio.sleep(max(0.0, due))
            step += 1

        for word in _words(script.get("reasoning", "")):
            await paced()
            yield _chunk(model, {"reasoning_content": word})
        for index, text in enumerate(chunks):
            if index == script.get("error_after"):
                message = script.get("error_message", "scripted mid-stream failure")
                yield f"data: {json.dumps({'error': {'message': message}})}\n\n"
                return
            if index == script.get("break_after"):
                raise ConnectionResetError("scripted break")
            await paced()
            logprobs = _logprobs(text, index, body.get("top_logprobs") or 0) if body.get("logprobs") else None
            yield _chunk(model, {"content": text}, logprobs=logprobs)
        for index, call in enumerate(script.get("tool_calls", [])):
            for delta in _call_deltas(index, call):
                await paced()
                yield _chunk(model, {"tool_calls": [delta]})
        yield _chunk(model, {}, finish)
        if not script.get("no_usage"):
            # As vLLM reports it: reasoning is part of the completion, with no separate count.
            completion = len(chunks) + len(_words(script.get("reasoning", "")))
            usage = script.get("usage") or {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
                "prompt_tokens_details": {"cached_tokens": script.get("cached_tokens", 0)},
            }
            # (a chunk as vLLM's last: the chunk's fields, no choices, the usage)
            last = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time())}
            yield f"data: {json.dumps({**last, 'model': model, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"
        stats["streams_finished"] += 1
    except (asyncio.CancelledError, GeneratorExit):
        stats["streams_aborted"] += 1
        stats["last_abort_at"] = time.time()
        raise


async def requests_log(request: Request) -> Response:
    if request.method == "DELETE":
        received.clear()
        authorizations.clear()
        arrivals.clear()
        failures.clear()
        received_tokenize.clear()
        for key in stats:
            stats[key] = 0
        return JSONResponse({})
    return JSONResponse(received)


async def stats_view(request: Request) -> Response:
    return JSONResponse({**stats, "pid": os.getpid(), "authorizations": authorizations, "arrivals": arrivals})


async def tokenize(request: Request) -> Response:
    """vLLM's /tokenize for chat messages: here one token per word of every message."""
    body = await request.json()
    received_tokenize.append(body)
    count = prompt_tokens(body)
    return JSONResponse({"count": count, "max_model_len": 4096, "tokens": list(range(count))})


def png(width: int = 1, height: int = 1) -> bytes:
    """A real PNG image of that size."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


async def files(request: Request) -> Response:
    stats["files_served"] += 1
    name = request.path_params["name"]
    if name == "dot.png":
        return Response(png(), media_type="image/png")
    if name == "text":
        return Response("not an image", media_type="text/plain")
    if name == "report":  # a PDF at a URL that does not name it one
        return Response(pdf("Revenue rose 12 percent."), media_type="application/pdf")
    return Response("not found", status_code=404)


async def redirect(request: Request) -> Response:
    return Response(status_code=302, headers={"Location": request.query_params["to"]})


EMBEDDING_DIMENSIONS = 8


def fake_embedding(text: str) -> list[float]:
    """A text's vector as an embeddings server would give it: a direction per word (by its hash),
    summed and normalised, so that texts sharing words lie close."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in text.lower().split():
        digest = hashlib.sha256(word.strip(".,;:!?").encode()).digest()
        for i in range(EMBEDDING_DIMENSIONS):
            vector[i] += digest[i] / 255 - 0.5
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings, as an OpenAI-compatible server answers it; a text holding
    `fail-embedding` makes it answer 500, one holding `slow-embedding` half a second late, one
    holding `stalled-embedding` three seconds late (time to stop a worker waiting on it)."""
    body = await request.json()
    stats["embedding_requests"] = stats.get("embedding_requests", 0) + 1
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    if any("fail-embedding" in text for text in texts):
        return JSONResponse({"error": {"message": "embedding failed"}}, status_code=500)
    if any("stalled-embedding" in text for text in texts):
        await asyncio.sleep(3)
    elif any("slow-embedding" in text for text in texts):
        await asyncio.sleep(0.5)
    data = [{"object": "embedding", "index": i, "embedding": fake_embedding(t)} for i, t in enumerate(texts)]
    tokens = sum(len(t.split()) for t in texts)
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": "fake-upstream", "object": "model"}]})


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/_requests", requests_log, methods=["GET", "DELETE"]),
        Route("/_stats", stats_view, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/_files/{name}", files, methods=["GET"]),
        Route("/_redirect", redirect, methods=["GET"]),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

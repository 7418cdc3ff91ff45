"""Reading a document with bounded time and memory: the formats that are parsed (PDF, DOCX) are
read in a child process with an address-space limit and a deadline, so that a hostile file (a
PDF bomb: deep nesting, a huge page count, streams that expand a thousandfold) costs what the
limits allow and fails only itself.

Two ways: `read_document` (an `input_file`: its bytes in memory, bounded by the request's limit;
text and HTML read in a thread, their cost linear in their size), and `stream_document` (a file
being ingested, any size: read by the child from a file on disk, its text sent back a page or a
piece at a time, so that neither process holds the whole of it).

`python -m app.documents.isolated MODE KIND MEMORY_MB WHERE` is the child: `read` takes the
bytes on stdin (WHERE: how many of a PDF's pages to draw as images) and answers one JSON object;
`stream` reads the file at WHERE and answers JSON lines.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import orjson

from app.documents.formats import (
    Document,
    DocumentRefused,
    docx_blocks,
    kind_of,
    page_images,
    pdf_pages,
    read_docx,
    read_html,
    read_pdf,
    read_text,
    text_blocks,
)
from app.process.child_process import die_with_parent

T = TypeVar("T")

STREAMED_PDF_PAGES = 100_000  # a file ingested may be long; its time and memory stay bounded
_LINE_LIMIT = 64 * 1024 * 1024  # one page's or piece's text, as JSON


async def read_document(raw: bytes, filename: str, *, seconds: float, memory_mb: int, page_images: int = 0) -> Document:
    """The document's text (and, for a PDF, its first `page_images` pages as images);
    `DocumentRefused` for a file that cannot or may not be read."""
    kind = kind_of(raw, filename)
    if kind == "text":
        return Document(await asyncio.to_thread(read_text, raw))
    if kind == "html":
        return Document(await asyncio.to_thread(read_html, raw))
    child = await _child("read", kind, memory_mb, images=page_images)
    try:
        async with asyncio.timeout(seconds):
            out, _ = await child.communicate(raw)
    except TimeoutError:
        raise DocumentRefused("too_large", f"reading it took longer than {seconds:g} s") from None
    finally:
        await _ended(child)
    if not out:  # killed for its memory, or crashed inside a parser's C code
        raise _died(memory_mb)
    answer = orjson.loads(out)
    if "refused" in answer:
        raise DocumentRefused(answer["refused"], answer["message"])
    return Document(answer["text"], answer.get("pages"), tuple(answer.get("images", ())))


async def stream_document(path: Path, filename: str, *, seconds: float, memory_mb: int) -> AsyncIterator[str]:
    """The document's text, a page (PDF) or a piece at a time: a parsed format read by a child from
    `path`, text and HTML here, a piece at a time in a thread. `seconds` bounds the reading alone,
    not what the caller does with each piece meanwhile."""
    with path.open("rb") as head:
        kind = kind_of(head.read(1024), filename)
    clock = _ReadingClock(seconds)
    if kind in ("text", "html"):
        with path.open("rb") as source:
            pieces = text_blocks(source, html=kind == "html")
            while (piece := await clock.timed(asyncio.to_thread(next, pieces, None))) is not None:
                yield piece
        return
    child = await _child("stream", kind, memory_mb, path)
    assert child.stdout is not None
    try:
        while line := await clock.timed(child.stdout.readline()):
            answer = orjson.loads(line)
            if "refused" in answer:
                raise DocumentRefused(answer["refused"], answer["message"])
            if answer.get("end"):
                return
            yield answer["text"]
    finally:
        await _ended(child)
    raise _died(memory_mb)  # its output ended before its end


class _ReadingClock:
    """The time spent waiting for a document's reader, against its allowance."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.left = seconds

    async def timed(self, waiting: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            async with asyncio.timeout(max(self.left, 0.0)):
                return await waiting
        except TimeoutError:
            raise DocumentRefused("too_large", f"reading it took longer than {self.seconds:g} s") from None
        finally:
            self.left -= time.monotonic() - started


async def _child(
    mode: str, kind: str, memory_mb: int, path: Path | None = None, images: int = 0
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.documents.isolated",
        mode,
        kind,
        str(memory_mb),
        str(path) if path is not None else str(images),
        stdin=asyncio.subprocess.PIPE if path is None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent,
        limit=_LINE_LIMIT,
    )


async def _ended(child: asyncio.subprocess.Process) -> None:
    if child.returncode is None:
        child.kill()
        await child.wait()


def _died(memory_mb: int) -> DocumentRefused:
    return DocumentRefused("invalid", f"reading it failed (it needed more than {memory_mb} MB, or is damaged)")


def _read(kind: str, images: int) -> dict[str, object]:
    raw = sys.stdin.buffer.read()
    if kind == "pdf":
        document = read_pdf(raw)
        return {"text": document.text, "pages": document.pages, "images": page_images(raw, images)}
    return {"text": read_docx(raw)}


def _blocks(kind: str, path: Path) -> Iterator[str]:
    with path.open("rb") as source:
        if kind == "pdf":
            yield from pdf_pages(source, STREAMED_PDF_PAGES)
        elif kind == "docx":
            yield from docx_blocks(source)
        else:
            yield from text_blocks(source, html=kind == "html")


def _main(mode: str, kind: str, memory_mb: int, where: str) -> None:
    """`where`: the file's path (stream), or how many page images to draw (read)."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = sys.stdout.buffer
    try:
        if mode == "read":
            out.write(orjson.dumps(_read(kind, int(where))))
            return
        for block in _blocks(kind, Path(where)):
            out.write(orjson.dumps({"text": block}) + b"\n")
            out.flush()
        out.write(b'{"end":true}\n')
    except DocumentRefused as refused:
        out.write(orjson.dumps({"refused": refused.reason, "message": refused.message}) + b"\n")
    except MemoryError:
        out.write(orjson.dumps({"refused": "too_large", "message": f"reading it needs more than {memory_mb} MB"}))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])

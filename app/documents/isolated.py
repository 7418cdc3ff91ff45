"""Reading a document with bounded time and memory: the formats that are parsed (PDF, DOCX) are
read in a child process with an address-space limit and a deadline, so that a hostile file (a
PDF bomb: deep nesting, a huge page count, streams that expand a thousandfold) costs what the
limits allow and fails only itself. Text and HTML are read in a thread: their cost is linear in
their size, which the caller bounds.

`python -m app.documents.isolated KIND MEMORY_MB` is the child: the bytes on stdin, the result as
JSON on stdout.
"""

from __future__ import annotations

import asyncio
import resource
import sys

import orjson

from app.documents.formats import Document, DocumentRefused, kind_of, read_docx, read_html, read_pdf, read_text
from app.process.child_process import die_with_parent


async def read_document(raw: bytes, filename: str, *, seconds: float, memory_mb: int) -> Document:
    """The document's text; `DocumentRefused` for a file that cannot or may not be read."""
    kind = kind_of(raw, filename)
    if kind == "text":
        return Document(await asyncio.to_thread(read_text, raw))
    if kind == "html":
        return Document(await asyncio.to_thread(read_html, raw))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.documents.isolated",
        kind,
        str(memory_mb),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        async with asyncio.timeout(seconds):
            out, _ = await child.communicate(raw)
    except TimeoutError:
        raise DocumentRefused("too_large", f"reading it took longer than {seconds:g} s") from None
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if not out:  # killed for its memory, or crashed inside a parser's C code
        raise DocumentRefused("invalid", f"reading it failed (it needed more than {memory_mb} MB, or is damaged)")
    answer = orjson.loads(out)
    if "refused" in answer:
        raise DocumentRefused(answer["refused"], answer["message"])
    return Document(answer["text"], answer.get("pages"))


def _child(kind: str, memory_mb: int) -> dict[str, object]:
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    raw = sys.stdin.buffer.read()
    try:
        if kind == "pdf":
            document = read_pdf(raw)
            return {"text": document.text, "pages": document.pages}
        return {"text": read_docx(raw)}
    except DocumentRefused as refused:
        return {"refused": refused.reason, "message": refused.message}
    except MemoryError:
        return {"refused": "too_large", "message": f"reading it needs more than {memory_mb} MB"}


if __name__ == "__main__":
    sys.stdout.buffer.write(orjson.dumps(_child(sys.argv[1], int(sys.argv[2]))))

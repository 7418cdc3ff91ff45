"""What a file is, and its text: PDF (pypdf, page by page), DOCX (python-docx: paragraphs and
tables), HTML (the text a reader sees, without scripts and styles) and text of every kind (plain,
Markdown, code, JSON, CSV…, in UTF-8 or UTF-16 with its byte-order mark).

A file is known by its first bytes where it has a signature (PDF, ZIP for DOCX) and by its name
otherwise; a file that claims to be a PDF or a DOCX and is not one is `invalid`, one that is
neither text nor a format read here `unsupported`. The functions are pure: `isolated.py` runs the
ones that parse binary formats in a child process.
"""

from __future__ import annotations

import base64
import codecs
import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import BinaryIO, Literal

Kind = Literal["pdf", "docx", "html", "text"]

MAX_TEXT_CHARS = 4_000_000  # about a million tokens: more than any model here reads at once
MAX_PDF_PAGES = 2_000

_HTML_NAMES = (".html", ".htm", ".xhtml")
_BINARY_NAMES = (
    *(".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tiff", ".ico"),
    *(".zip", ".gz", ".tar", ".7z", ".rar", ".exe", ".dll", ".so", ".bin"),
    *(".mp3", ".wav", ".mp4", ".mov", ".avi"),
    *(".doc", ".ppt", ".pptx", ".xls", ".xlsx", ".odt"),
)


_NOT_TEXT = "it is neither text in UTF-8 or UTF-16 nor a format read here"
_BINARY = "it holds binary data, not text"


class DocumentRefused(Exception):
    """The file cannot be read: `invalid` (it is not what it claims to be, or is damaged),
    `unsupported` (a format not read here) or `too_large` (its text is past the limit)."""

    def __init__(self, reason: Literal["invalid", "unsupported", "too_large"], message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Document:
    text: str
    pages: int | None = None  # a PDF's
    page_images: tuple[str, ...] = ()  # its first pages as PNG data URLs, when asked for


def kind_of(raw: bytes, filename: str) -> Kind:
    name = filename.lower()
    if raw.startswith(b"%PDF-") or (name.endswith(".pdf") and b"%PDF-" in raw[:1024]):
        return "pdf"
    if name.endswith(".pdf"):
        raise DocumentRefused("invalid", "it is named as a PDF but is not one")
    if name.endswith(".docx"):
        if not raw.startswith(b"PK\x03\x04"):
            raise DocumentRefused("invalid", "it is named as a DOCX document but is not one")
        return "docx"
    if name.endswith(_BINARY_NAMES):
        raise DocumentRefused("unsupported", f"files of type '{name.rsplit('.', 1)[-1]}' are not read here")
    if name.endswith(_HTML_NAMES):
        return "html"
    return "text"


def read_text(raw: bytes) -> str:
    """Text of any kind, as characters; `unsupported` for bytes that are not text."""
    encoding = "utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8"
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        raise DocumentRefused("unsupported", _NOT_TEXT) from None
    if "\x00" in text:
        raise DocumentRefused("unsupported", _BINARY)
    return _bounded(text)


def read_html(raw: bytes) -> str:
    reader = _HtmlText()
    reader.feed(read_text(raw))
    reader.close()
    return _bounded(re.sub(r"\n{3,}", "\n\n", "".join(reader.parts)).strip())


def read_pdf(raw: bytes) -> Document:
    pages, size = [], 0
    for page in pdf_pages(io.BytesIO(raw), MAX_PDF_PAGES):
        size += len(page)
        if size > MAX_TEXT_CHARS:
            raise _too_long()
        pages.append(page)
    return Document("\n\n".join(pages), len(pages))


def pdf_pages(source: BinaryIO, max_pages: int) -> Iterator[str]:
    """Each page's text, marked `[page N]`, read as it is asked for (pypdf reads a file's objects
    as they are needed)."""
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PyPdfError

    try:
        reader = PdfReader(source)
        if reader.is_encrypted:
            raise DocumentRefused("invalid", "it is an encrypted PDF")
        count = len(reader.pages)
        if count > max_pages:
            raise DocumentRefused("too_large", f"it has {count} pages, more than {max_pages}")
        for number, page in enumerate(reader.pages, 1):
            yield f"[page {number}]\n{(page.extract_text() or '').strip()}"
    except DocumentRefused:
        raise
    except LimitReachedError as limit:  # pypdf's own bounds on what one stream may expand or parse into
        raise DocumentRefused("too_large", f"it is past what is read of one PDF ({limit})") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OSError):
        raise DocumentRefused("invalid", "it is a damaged PDF that could not be read") from None


PAGE_IMAGE_SIDE = 1024  # pixels of a page image's longer side


def page_images(raw: bytes, count: int) -> tuple[str, ...]:
    """The first `count` pages as PNG data URLs, their longer side PAGE_IMAGE_SIDE pixels (as a
    model that sees images is sent a PDF's pages beside their text); none where pdfium cannot
    draw them (the text is read all the same)."""
    if count <= 0:
        return ()
    import pypdfium2

    images = []
    try:
        document = pypdfium2.PdfDocument(raw)
        for index in range(min(count, len(document))):
            page = document[index]
            width, height = page.get_size()
            bitmap = page.render(scale=PAGE_IMAGE_SIDE / max(width, height, 1.0))
            out = io.BytesIO()
            bitmap.to_pil().save(out, format="PNG", optimize=True)
            images.append("data:image/png;base64," + base64.b64encode(out.getvalue()).decode())
    except pypdfium2.PdfiumError:
        return ()
    return tuple(images)


def read_docx(raw: bytes) -> str:
    return _bounded("\n".join(docx_blocks(io.BytesIO(raw))))


def docx_blocks(source: BinaryIO) -> Iterator[str]:
    """Its paragraphs, then its tables' rows as `cell | cell`."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    damaged = DocumentRefused("invalid", "it is a damaged DOCX document that could not be read")
    try:
        document = docx.Document(source)
        blocks = [paragraph.text for paragraph in document.paragraphs]
        for table in document.tables:
            blocks += [" | ".join(cell.text for cell in row.cells) for row in table.rows]
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, OSError):
        raise damaged from None
    except Exception as exc:  # lxml's parse errors, and whatever else a broken package raises
        if type(exc).__module__.startswith(("lxml", "docx")):
            raise damaged from None
        raise
    yield from (block for block in blocks if block.strip())


def text_blocks(source: BinaryIO, html: bool, piece_bytes: int = 1024 * 1024) -> Iterator[str]:
    """Text (or an HTML page's text) read a piece at a time, decoded as `read_text` decodes."""
    head = source.read(piece_bytes)
    encoding = "utf-8-sig" if head.startswith(codecs.BOM_UTF8) else "utf-8"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    decoder = codecs.getincrementaldecoder(encoding)()
    page = _HtmlText() if html else None
    raw = head
    while raw:
        try:
            text = decoder.decode(raw)
        except UnicodeDecodeError:
            raise DocumentRefused("unsupported", _NOT_TEXT) from None
        if "\x00" in text:
            raise DocumentRefused("unsupported", _BINARY)
        if page is None:
            yield text
        else:
            page.feed(text)
            yield "".join(page.parts)
            page.parts.clear()
        raw = source.read(piece_bytes)


def _bounded(text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        raise _too_long()
    return text


def _too_long() -> DocumentRefused:
    return DocumentRefused("too_large", f"its text is longer than {MAX_TEXT_CHARS:,} characters")


class _HtmlText(HTMLParser):
    """The text of a page as a reader sees it: no scripts, styles or markup; blocks on lines."""

    _HIDDEN = {"script", "style", "noscript", "template", "head"}
    _BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)

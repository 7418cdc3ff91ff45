"""What a file is, and its text: PDF (pypdf, page by page), DOCX (python-docx: paragraphs and
tables), HTML (the text a reader sees, without scripts and styles) and text of every kind (plain,
Markdown, code, JSON, CSV…, in UTF-8 or UTF-16 with its byte-order mark).

A file is known by its first bytes where it has a signature (PDF, ZIP for DOCX) and by its name
otherwise; a file that claims to be a PDF or a DOCX and is not one is `invalid`, one that is
neither text nor a format read here `unsupported`. The functions are pure: `isolated.py` runs the
ones that parse binary formats in a child process.
"""

from __future__ import annotations

import codecs
import io
import re
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Literal

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
        raise DocumentRefused("unsupported", "it is neither text in UTF-8 or UTF-16 nor a format read here") from None
    if "\x00" in text:
        raise DocumentRefused("unsupported", "it holds binary data, not text")
    return _bounded(text)


def read_html(raw: bytes) -> str:
    reader = _HtmlText()
    reader.feed(read_text(raw))
    reader.close()
    return _bounded(re.sub(r"\n{3,}", "\n\n", "".join(reader.parts)).strip())


def read_pdf(raw: bytes) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted:
            raise DocumentRefused("invalid", "it is an encrypted PDF")
        count = len(reader.pages)
        if count > MAX_PDF_PAGES:
            raise DocumentRefused("too_large", f"it has {count} pages, more than {MAX_PDF_PAGES}")
        pages, size = [], 0
        for number, page in enumerate(reader.pages, 1):
            text = page.extract_text() or ""
            size += len(text)
            if size > MAX_TEXT_CHARS:
                raise _too_long()
            pages.append(f"[page {number}]\n{text.strip()}")
    except DocumentRefused:
        raise
    except LimitReachedError as limit:  # pypdf's own bounds on what one stream may expand or parse into
        raise DocumentRefused("too_large", f"it is past what is read of one PDF ({limit})") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OSError):
        raise DocumentRefused("invalid", "it is a damaged PDF that could not be read") from None
    return Document("\n\n".join(pages), count)


def read_docx(raw: bytes) -> str:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(raw))
        blocks = [paragraph.text for paragraph in document.paragraphs]
        for table in document.tables:
            blocks += [" | ".join(cell.text for cell in row.cells) for row in table.rows]
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, OSError):
        raise DocumentRefused("invalid", "it is a damaged DOCX document that could not be read") from None
    except Exception as exc:  # lxml's parse errors, and whatever else a broken package raises
        if type(exc).__module__.startswith(("lxml", "docx")):
            raise DocumentRefused("invalid", "it is a damaged DOCX document that could not be read") from None
        raise
    return _bounded("\n".join(block for block in blocks if block.strip()))


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

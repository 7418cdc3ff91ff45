"""Documents read into text: what each format gives, what is refused and why, and the child
process's bounds (a reader that needs more memory than it may have fails alone)."""

from __future__ import annotations

import pytest

from app.documents.formats import MAX_TEXT_CHARS, DocumentRefused, kind_of, read_html, read_text
from app.documents.isolated import read_document
from tests.documents import docx_document, pdf


@pytest.mark.parametrize(
    ("raw", "filename", "kind"),
    [
        (pdf("x"), "report.pdf", "pdf"),
        (pdf("x"), "no-extension", "pdf"),  # known by its signature
        (b"PK\x03\x04rest", "letter.docx", "docx"),
        (b"<p>x</p>", "page.HTML", "html"),
        (b"x,y", "table.csv", "text"),
        (b"anything", "unnamed", "text"),
    ],
)
def test_a_file_is_known_by_its_signature_then_its_name(raw: bytes, filename: str, kind: str) -> None:
    assert kind_of(raw, filename) == kind


@pytest.mark.parametrize(
    ("raw", "filename", "reason"),
    [
        (b"just text", "fake.pdf", "invalid"),
        (b"just text", "fake.docx", "invalid"),
        (b"\x89PNG....", "photo.png", "unsupported"),
        (b"...", "sheet.xlsx", "unsupported"),
    ],
)
def test_a_file_that_is_not_what_it_claims_or_not_read_here_is_refused(raw: bytes, filename: str, reason: str) -> None:
    with pytest.raises(DocumentRefused) as refused:
        kind_of(raw, filename)
    assert refused.value.reason == reason


def test_text_is_utf8_or_utf16_with_its_mark_and_never_binary() -> None:
    assert read_text("caf\u00e9".encode()) == "caf\u00e9"
    assert read_text("\ufeffcaf\u00e9".encode("utf-8")) == "caf\u00e9"
    assert read_text("caf\u00e9".encode("utf-16")) == "caf\u00e9"
    for raw in (b"\x80\x81 not utf8 \xfd", b"text\x00with a NUL"):
        with pytest.raises(DocumentRefused) as refused:
            read_text(raw)
        assert refused.value.reason == "unsupported"
    with pytest.raises(DocumentRefused) as refused:
        read_text(b"x" * (MAX_TEXT_CHARS + 1))
    assert refused.value.reason == "too_large"


def test_html_is_read_as_a_reader_sees_it() -> None:
    page = b"<html><head><style>p{}</style><title>T</title></head><body><h1>Head</h1><p>One &amp; two</p>"
    page += b"<script>alert(1)</script><ul><li>a</li><li>b</li></ul></body></html>"
    assert read_html(page) == "Head\n\nOne & two\n\na\n\nb"


async def test_pdf_and_docx_are_read_in_a_child_process() -> None:
    document = await read_document(pdf("First", "Second"), "two.pdf", seconds=30, memory_mb=1024)
    assert (document.text, document.pages) == ("[page 1]\nFirst\n\n[page 2]\nSecond", 2)
    letter = await read_document(docx_document("Dear reader,"), "letter.docx", seconds=30, memory_mb=1024)
    assert letter.text == "Dear reader,\ncell one | cell two" and letter.pages is None


async def test_a_reader_that_needs_more_memory_than_it_may_have_fails_alone() -> None:
    many_pages = pdf(*(["word " * 400] * 1500), compress=True)
    with pytest.raises(DocumentRefused) as refused:
        await read_document(many_pages, "tall.pdf", seconds=60, memory_mb=40)
    assert refused.value.reason in ("too_large", "invalid") and "40 MB" in refused.value.message
    # (the same file with room to read it)
    assert (await read_document(many_pages, "tall.pdf", seconds=60, memory_mb=1024)).pages == 1500

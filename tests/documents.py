"""Documents made for the tests: PDFs written object by object (text pages, and hostile ones),
DOCX documents written by python-docx."""

from __future__ import annotations

import io
import zlib

import docx


def pdf(*pages: str, compress: bool = False) -> bytes:
    """A PDF whose pages show these texts (one line each) in Helvetica."""
    font = 3 + 2 * len(pages)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (3 + 2 * n) for n in range(len(pages))), len(pages)),
    ]
    for n, text in enumerate(pages):
        shown = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (4 + 2 * n, font)
        )
        objects.append(_stream(b"BT /F1 12 Tf 72 720 Td (" + shown + b") Tj ET", compress))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return document(objects)


def pdf_with_content(content: bytes) -> bytes:
    """A one-page PDF whose page's content stream is `content` (compressed)."""
    return document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            _stream(content, compress=True),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def pdf_nested(depth: int) -> bytes:
    """A PDF whose catalog holds an array nested `depth` levels deep."""
    return document(
        [
            b"<< /Type /Catalog /Pages 2 0 R /Deep " + b"[" * depth + b"]" * depth + b" >>",
            b"<< /Type /Pages /Kids [] /Count 0 >>",
        ]
    )


def pdf_claiming_pages(count: int) -> bytes:
    """A PDF whose page tree says it has `count` pages, and whose one kid refers to itself."""
    return document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 2 0 R 2 0 R] /Count %d >>" % count,
        ]
    )


def docx_document(*paragraphs: str) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "cell one", "cell two"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _stream(data: bytes, compress: bool) -> bytes:
    if compress:
        data = zlib.compress(data, 9)
        return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def document(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the first its catalog), with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)

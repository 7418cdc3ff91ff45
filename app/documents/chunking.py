"""A document's text cut into overlapping chunks of about `max_chunk_size_tokens` tokens, each
starting `max - overlap` tokens after the one before (OpenAI's static chunking), as the text
streams in: only the chunk being filled is held.

Tokens are counted as words and punctuation marks, each with the spaces after it: close to what a
word-piece or BPE tokenizer counts in English, and the same on every machine (no tokenizer
files). Chunks never cross nothing but whitespace away: the text of a chunk is the document's,
spaces included, trimmed at its ends.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

_TOKEN = re.compile(r"\w+\s*|[^\w\s]\s*|\s+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: int
    text: str
    tokens: int


def tokens_of(text: str) -> list[str]:
    """The text's tokens, each with the whitespace after it; the text is their concatenation
    (leading whitespace aside)."""
    return [token for token in _TOKEN.findall(text) if not token.isspace()]


class Chunker:
    def __init__(self, max_tokens: int, overlap: int) -> None:
        self.max_tokens = max_tokens
        self.step = max(1, max_tokens - overlap)
        self._held: list[str] = []
        self._seq = 0
        self._fresh = 0  # tokens held that no chunk has shown yet

    def add(self, text: str) -> Iterator[Chunk]:
        """The chunks this text completes."""
        for token in tokens_of(text):
            self._held.append(token)
            self._fresh += 1
            if len(self._held) == self.max_tokens:
                yield self._emit()
                del self._held[: self.step]
                self._fresh = 0  # what is left is the overlap, shown already

    def finish(self) -> Iterator[Chunk]:
        """The last chunk, if any text is held that no chunk has shown."""
        if self._fresh > 0 and self._held:
            yield self._emit()
        self._held = []
        self._fresh = 0

    def _emit(self) -> Chunk:
        chunk = Chunk(self._seq, "".join(self._held).strip(), len(self._held))
        self._seq += 1
        return chunk


async def chunks_of(blocks: AsyncIterator[str], max_tokens: int, overlap: int) -> AsyncIterator[Chunk]:
    """The chunks of a text that arrives in blocks (pages, paragraphs), blocks parted by a blank line."""
    chunker = Chunker(max_tokens, overlap)
    first = True
    async for block in blocks:
        for chunk in chunker.add(block if first else "\n\n" + block):
            yield chunk
        first = False
    for chunk in chunker.finish():
        yield chunk

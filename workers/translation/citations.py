"""Citation markers in a streamed answer turned into annotations (pure).

The model reads each search result with a marker (`【3】`: app/protocol/file_search.py) and
writes the marker after what it took from it. The marker never reaches a client: it is cut from
the text, and an annotation stands for it, placed in characters of the text without markers as
OpenAI places it: a file's `file_citation` at the marker's `index`; a web page's `url_citation`
over the sentence the marker closes (`start_index` where that sentence began, `end_index` where
the marker stood). A marker split across deltas is held back until it is whole (or is found not
to be one), so that no part of it is streamed either. A marker of no result given (a model's
invention) is cut without an annotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.protocol.file_search import MARKER_CLOSE, MARKER_OPEN
from app.protocol.shapes import Item

_MARKER = re.compile(re.escape(MARKER_OPEN) + r"(\d{1,4})" + re.escape(MARKER_CLOSE))
_BEGUN = re.compile(re.escape(MARKER_OPEN) + r"\d{0,4}")
_SENTENCE_END = re.compile(r"[.!?;:](?:\s+)|\n\s*")


@dataclass
class CitationFilter:
    # By marker number - 1: what the marker's annotation says besides its place (its type, its
    # file or its page).
    citations: list[Item]
    shown: int = 0  # characters of text let through so far
    sentence_start: int = 0  # where the sentence being written began, in those characters
    held: str = ""
    last: str = ""  # the last character let through (a sentence's end may span two deltas)
    annotations: list[Item] = field(default_factory=list)

    @classmethod
    def resumed(cls, citations: list[Item], text: str, annotations: list[Item]) -> CitationFilter:
        """For a message another worker began with this text (its markers cut already)."""
        cited = cls(citations, annotations=annotations)
        cited._let_through(text)
        return cited

    def feed(self, text: str) -> tuple[str, list[Item]]:
        """The text to stream now, and the annotations it completes."""
        data, self.held = self.held + text, ""
        out: list[str] = []
        made: list[Item] = []
        at = 0
        while (start := data.find(MARKER_OPEN, at)) >= 0:
            out.append(self._let_through(data[at:start]))
            whole = _MARKER.match(data, start)
            if whole is not None:
                number = int(whole.group(1))
                if 1 <= number <= len(self.citations):
                    made.append(self._placed(self.citations[number - 1]))
                at = whole.end()
            elif _BEGUN.fullmatch(data, start):  # may still become a marker: wait for the rest
                self.held = data[start:]
                at = len(data)
                break
            else:
                out.append(self._let_through(MARKER_OPEN))
                at = start + len(MARKER_OPEN)
        out.append(self._let_through(data[at:]))
        self.annotations += made
        return "".join(out), made

    def flush(self) -> str:
        """What was held at the answer's end (a marker begun, never closed: it is text)."""
        rest, self.held = self.held, ""
        return self._let_through(rest)

    def _let_through(self, text: str) -> str:
        if not text:
            return text
        ends = [found.end() for found in _SENTENCE_END.finditer(self.last + text)]
        if ends:
            self.sentence_start = self.shown - len(self.last) + ends[-1]
        self.shown += len(text)
        self.last = text[-1]
        return text

    def _placed(self, citation: Item) -> Item:
        if citation["type"] == "url_citation":
            start = min(self.sentence_start, self.shown)
            return {**citation, "start_index": start, "end_index": self.shown}
        return {**citation, "index": self.shown}

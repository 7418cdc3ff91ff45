"""Citation markers in a streamed answer turned into `file_citation` annotations (pure).

The model reads each file search result with a marker (`【3】`: app/protocol/file_search.py)
and writes the marker after what it took from it. The marker never reaches a client: it is cut
from the text, and an annotation names the result's file at the place in the text where it
stood (`index`, in characters of the text without markers, as OpenAI places it). A marker split
across deltas is held back until it is whole (or is found not to be one), so that no part of it
is streamed either. A marker of no result given (a model's invention) is cut without an annotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.protocol.file_search import MARKER_CLOSE, MARKER_OPEN
from app.protocol.shapes import Item

_MARKER = re.compile(re.escape(MARKER_OPEN) + r"(\d{1,4})" + re.escape(MARKER_CLOSE))
_BEGUN = re.compile(re.escape(MARKER_OPEN) + r"\d{0,4}")


@dataclass
class CitationFilter:
    citations: list[tuple[str, str]]  # by marker number - 1: (file id, filename)
    shown: int = 0  # characters of text let through so far
    held: str = ""
    annotations: list[Item] = field(default_factory=list)

    def feed(self, text: str) -> tuple[str, list[Item]]:
        """The text to stream now, and the annotations it completes."""
        data, self.held = self.held + text, ""
        out: list[str] = []
        made: list[Item] = []
        at = 0
        while (start := data.find(MARKER_OPEN, at)) >= 0:
            out.append(data[at:start])
            whole = _MARKER.match(data, start)
            if whole is not None:
                number = int(whole.group(1))
                if 1 <= number <= len(self.citations):
                    file_id, filename = self.citations[number - 1]
                    index = self.shown + sum(len(piece) for piece in out)
                    made.append({"type": "file_citation", "file_id": file_id, "filename": filename, "index": index})
                at = whole.end()
            elif _BEGUN.fullmatch(data, start):  # may still become a marker: wait for the rest
                self.held = data[start:]
                at = len(data)
                break
            else:
                out.append(MARKER_OPEN)
                at = start + len(MARKER_OPEN)
        out.append(data[at:])
        shown = "".join(out)
        self.shown += len(shown)
        self.annotations += made
        return shown, made

    def flush(self) -> str:
        """What was held at the answer's end (a marker begun, never closed: it is text)."""
        rest, self.held = self.held, ""
        self.shown += len(rest)
        return rest

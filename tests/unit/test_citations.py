"""Citation markers cut from a streamed answer and turned into annotations, however the deltas
split them; and a file search in flight at a lost worker taken up again."""

from __future__ import annotations

import pytest

from app.protocol.accumulate import continuable
from workers.translation.citations import CitationFilter
from workers.translation.output_items import FileSearchCallOutput
from workers.translation.translate import StreamTranslator

CITED = [("file-a", "a.txt"), ("file-b", "b.txt")]


@pytest.mark.parametrize(
    "deltas",
    [
        ["Thirty days【1】 and Fridays【2】."],
        ["Thirty days", "【", "1", "】 and Fridays", "【2", "】", "."],
        ["Thirty days【", "1】 and Fridays【2】", "."],
        list("Thirty days【1】 and Fridays【2】."),
    ],
)
def test_markers_are_cut_and_placed_however_the_deltas_split_them(deltas: list[str]) -> None:
    cited = CitationFilter(CITED)
    shown = [cited.feed(delta)[0] for delta in deltas] + [cited.flush()]
    assert "".join(shown) == "Thirty days and Fridays."
    assert not any("【" in piece or "】" in piece for piece in shown)
    assert [(a["file_id"], a["index"]) for a in cited.annotations] == [("file-a", 11), ("file-b", 23)]


def test_what_is_not_a_marker_stays_text_and_an_unknown_one_is_cut() -> None:
    cited = CitationFilter(CITED)
    text = "".join(cited.feed(piece)[0] for piece in ["A 【bracket】 here", " and 【9】 there 【12"]) + cited.flush()
    assert text == "A 【bracket】 here and  there 【12"
    assert cited.annotations == []


def test_a_search_in_flight_at_a_lost_worker_is_made_again_by_the_next() -> None:
    settings = {
        "text": {"format": {"type": "text"}},
        "requested": {"runs_file_search": True, "include": []},
        "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
        "reasoning": {},
    }
    searching = {
        "id": "fs_1",
        "type": "file_search_call",
        "status": "in_progress",
        "queries": ["days off"],
        "results": None,
    }
    assert continuable([searching], settings)
    translator = StreamTranslator.for_settings(settings)
    assert translator.continue_from([searching]) == ""
    interrupted = translator.interrupted
    assert isinstance(interrupted, FileSearchCallOutput) and interrupted.queries == ["days off"]
    assert translator.calls_to_make() == [interrupted]
    events = interrupted.closing([], "nothing found")
    assert [e["type"] for e in events] == ["response.file_search_call.completed", "response.output_item.done"]
    assert events[-1]["item"]["id"] == "fs_1" and events[-1]["item"]["status"] == "completed"

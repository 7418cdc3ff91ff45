"""Citation markers cut from a streamed answer and turned into annotations, however the deltas
split them; and a file search in flight at a lost worker taken up again."""

from __future__ import annotations

import pytest

from app.protocol.accumulate import continuable
from workers.translation.citations import CitationFilter
from workers.translation.output_items import FileSearchCallOutput, WebSearchCallOutput
from workers.translation.translate import StreamTranslator

CITED = [
    {"type": "file_citation", "file_id": "file-a", "filename": "a.txt"},
    {"type": "file_citation", "file_id": "file-b", "filename": "b.txt"},
]
PAGE = {"type": "url_citation", "url": "https://a.org/", "title": "A"}


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


@pytest.mark.parametrize(
    "deltas",
    [
        ["Tea is old. It came from China【1】. Coffee is newer【1】!"],
        ["Tea is old.", " It came", " from China【", "1】.", " Coffee is newer", "【1】!"],
        list("Tea is old. It came from China【1】. Coffee is newer【1】!"),
    ],
)
def test_a_page_s_citation_spans_the_sentence_its_marker_closes(deltas: list[str]) -> None:
    cited = CitationFilter([PAGE])
    text = "".join(cited.feed(delta)[0] for delta in deltas) + cited.flush()
    assert text == "Tea is old. It came from China. Coffee is newer!"
    spans = [text[a["start_index"] : a["end_index"]] for a in cited.annotations]
    assert spans == ["It came from China", "Coffee is newer"]
    assert all(a["url"] == "https://a.org/" and a["title"] == "A" for a in cited.annotations)


def test_a_resumed_message_places_its_next_citations_after_its_text() -> None:
    cited = CitationFilter.resumed([PAGE], "Written before. Half a sen", [{"type": "url_citation"}])
    text, made = cited.feed("tence【1】.")
    assert text == "tence."
    assert [(a["start_index"], a["end_index"]) for a in made] == [(16, 31)]
    assert len(cited.annotations) == 2


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


def test_a_web_search_in_flight_at_a_lost_worker_ends_failed_and_the_model_is_told() -> None:
    """Its query is not in the log (OpenAI's opening events carry no action): it cannot be made again."""
    settings = {
        "text": {"format": {"type": "text"}},
        "requested": {"runs_web_search": True, "include": []},
        "tools": [{"type": "web_search", "search_context_size": "medium"}],
        "reasoning": {},
    }
    searching = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
    assert continuable([searching], settings)
    translator = StreamTranslator.for_settings(settings)
    assert translator.continue_from([searching]) == ""
    interrupted = translator.interrupted
    assert isinstance(interrupted, WebSearchCallOutput) and interrupted.id == "ws_1"
    events = interrupted.closing(None, "interrupted")
    assert [e["type"] for e in events] == ["response.output_item.done"]
    assert events[-1]["item"] == {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "failed",
        "action": {"type": "search", "query": "", "queries": []},
    }

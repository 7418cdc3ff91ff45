"""`file_search` run by the server in the response loop: the model calls it, the request's vector
stores are searched, a `file_search_call` item with its three events in OpenAI's order, the
results kept but shown only under `include`, the model's citation markers turned into `file_citation`
annotations (never streamed raw, even split across deltas), and bad input refused."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from tests.conftest import FakeRuntime

HANDBOOK = (
    "Vacation policy. Every employee receives thirty days of paid vacation per year.\n\n"
    "Remote work. Employees may work from home on Mondays and Fridays."
)


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def searching(query: str, then: dict[str, Any]) -> str:
    arguments = json.dumps({"queries": [query]})
    return script(tool_calls=[{"name": "file_search", "arguments": arguments}], then=then)


@pytest.fixture
def store_id(vector_client: openai.OpenAI) -> str:
    store = vector_client.vector_stores.create(name="handbook")
    attached = vector_client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("handbook.txt", HANDBOOK.encode()), poll_interval_ms=100
    )
    assert attached.status == "completed"
    return store.id


def test_the_model_searches_the_stores_and_its_citation_becomes_an_annotation(
    vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    answer = {"chunks": ["Every employee gets thirty days", "【", "1】", " of vacation."]}
    response = vector_client.responses.create(
        model="fake",
        input=searching("vacation days", answer),
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
    )
    assert response.status == "completed"
    call, message = response.output
    assert call.type == "file_search_call" and call.id.startswith("fs_")
    assert (call.status, call.queries, call.results) == ("completed", ["vacation days"], None)
    text = message.content[0]
    assert text.text == "Every employee gets thirty days of vacation."
    assert [a.model_dump() for a in text.annotations] == [
        {"type": "file_citation", "file_id": _file_of(vector_client, store_id), "filename": "handbook.txt", "index": 31}
    ]
    offered = fake.requests()[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["file_search"]
    result = fake.requests()[1]["messages"][-1]
    assert (
        result["role"] == "tool"
        and "thirty days of paid vacation" in result["content"]
        and "【1】" in result["content"]
    )
    assert response.tools[0].model_dump(exclude_none=True) == {
        "type": "file_search",
        "vector_store_ids": [store_id],
        "max_num_results": 10,
        "ranking_options": {"ranker": "auto", "score_threshold": 0.0},
    }


def _file_of(client: openai.OpenAI, store_id: str) -> str:
    return client.vector_stores.files.list(store_id).data[0].id


def test_a_streamed_search_shows_its_events_in_order_and_no_marker(
    vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    answer = {"chunks": ["Thirty days", "【", "1", "】.", " Fridays from home", "【2】", "."]}
    with vector_client.responses.stream(
        model="fake",
        input=searching("vacation", answer),
        tools=[{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}],
        include=["file_search_call.results"],
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    search_events = [k for k in kinds if "file_search_call" in k]
    assert search_events == [
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
    ]
    added = kinds.index("response.output_item.added")
    assert added < kinds.index("response.file_search_call.in_progress")
    assert kinds.index("response.file_search_call.completed") < kinds.index("response.output_item.done")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "【" not in deltas and "】" not in deltas and deltas == "Thirty days. Fridays from home."
    annotated = [e for e in events if e.type == "response.output_text.annotation.added"]
    # (one result was given: 【2】 names none, and is cut without an annotation)
    assert [(e.annotation_index, e.annotation.index) for e in annotated] == [(0, 11)]
    call = final.output[0]
    assert call.results is not None and len(call.results) == 1 and call.results[0].filename == "handbook.txt"
    assert all(r.score is not None and 0 <= r.score <= 1 for r in call.results) and call.results[0].text
    assert [a.index for a in final.output[1].content[0].annotations] == [11]


def test_tool_choice_filters_and_max_tool_calls_reach_the_search(
    vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    response = vector_client.responses.create(
        model="fake",
        input=searching("vacation", {"text": "Nothing."}),
        tools=[
            {
                "type": "file_search",
                "vector_store_ids": [store_id],
                "filters": {"type": "eq", "key": "team", "value": "nobody"},
            }
        ],
        tool_choice={"type": "file_search"},
        include=["file_search_call.results"],
    )
    assert fake.requests()[0]["tool_choice"] == {"type": "function", "function": {"name": "file_search"}}
    assert response.output[0].results == []  # the filter kept every file out
    assert "found nothing" in fake.requests()[1]["messages"][-1]["content"]
    twice = [{"name": "file_search", "arguments": json.dumps({"queries": [q]})} for q in ("vacation", "remote")]
    capped = vector_client.responses.create(
        model="fake",
        input=script(tool_calls=twice, then={"text": "Done."}),
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        max_tool_calls=1,
    )
    assert [item.type for item in capped.output] == ["file_search_call", "message"]  # the second call is dropped
    assert capped.output[0].queries == ["vacation"]


def test_a_replayed_search_is_not_made_again_and_the_model_reads_its_results(
    vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    replayed: Any = [
        {"role": "user", "content": "How long is vacation?"},
        {
            "type": "file_search_call",
            "id": "fs_earlier",
            "status": "completed",
            "queries": ["vacation"],
            "results": [{"file_id": "file-x", "filename": "old.txt", "score": 0.9, "text": "Vacation is 30 days."}],
        },
        {"role": "assistant", "content": "Thirty days."},
        {"role": "user", "content": "Thanks."},
    ]
    response = vector_client.responses.create(
        model="fake", input=replayed, tools=[{"type": "file_search", "vector_store_ids": [store_id]}], store=False
    )
    assert response.status == "completed" and [i.type for i in response.output] == ["message"]
    messages = fake.requests()[0]["messages"]
    call = next(m for m in messages if m.get("tool_calls"))
    assert call["tool_calls"][0]["function"]["name"] == "file_search"
    assert "Vacation is 30 days." in next(m for m in messages if m["role"] == "tool")["content"]


def test_input_items_show_a_sent_searchs_results_only_when_the_listing_includes_them(
    vector_client: openai.OpenAI, store_id: str
) -> None:
    sent: Any = [
        {
            "type": "file_search_call",
            "id": "fs_sent",
            "status": "completed",
            "queries": ["vacation"],
            "results": [{"file_id": "file-x", "filename": "old.txt", "score": 0.9, "text": "Vacation is 30 days."}],
        },
        {"role": "user", "content": "Thanks."},
    ]
    response = vector_client.responses.create(
        model="fake", input=sent, tools=[{"type": "file_search", "vector_store_ids": [store_id]}]
    )
    plain = vector_client.responses.input_items.list(response.id, order="asc").data
    assert plain[0].type == "file_search_call" and plain[0].results is None
    asked = vector_client.responses.input_items.list(response.id, order="asc", include=["file_search_call.results"])
    shown = asked.data[0]
    assert shown.type == "file_search_call" and shown.results and shown.results[0].text == "Vacation is 30 days."
    with pytest.raises(openai.BadRequestError) as refused:
        vector_client.responses.input_items.list(response.id, include=["file_search_call.everything"])  # type: ignore[list-item]
    assert refused.value.body["param"] == "include[0]"
    with pytest.raises(openai.BadRequestError) as refused:
        vector_client.responses.retrieve(response.id, include=["file_search_call.everything"])  # type: ignore[list-item]
    assert refused.value.body["param"] == "include[0]"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "file_search", "vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({"type": "file_search", "vector_store_ids": ["vs_unknown"]}, "tools[0].vector_store_ids[0]"),
        ({"type": "file_search", "vector_store_ids": ["x"], "max_num_results": 51}, "tools[0].max_num_results"),
        ({"type": "file_search", "vector_store_ids": ["x"], "filters": {"type": "eq"}}, "tools[0].filters.key"),
        (
            {"type": "file_search", "vector_store_ids": ["x"], "ranking_options": {"ranker": "none"}},
            "tools[0].ranking_options.ranker",
        ),
    ],
)
def test_a_bad_file_search_tool_is_refused_naming_its_parameter(
    vector_client: openai.OpenAI, fake: FakeRuntime, tool: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        vector_client.responses.create(model="fake", input="x", tools=[tool])  # type: ignore[list-item]
    assert refused.value.status_code in (400, 404) and refused.value.body["param"] == param
    assert fake.requests() == []


def test_another_accounts_store_is_a_404(
    vector_client: openai.OpenAI, other_vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        other_vector_client.responses.create(
            model="fake", input="x", tools=[{"type": "file_search", "vector_store_ids": [store_id]}]
        )
    assert refused.value.body["param"] == "tools[0].vector_store_ids[0]" and fake.requests() == []


def test_a_background_search_is_followed_and_resumed_and_a_conversation_keeps_it(
    vector_client: openai.OpenAI, fake: FakeRuntime, store_id: str
) -> None:
    tools: Any = [{"type": "file_search", "vector_store_ids": [store_id]}]
    answer = {"chunks": ["Thirty days", "【1】", "."]}
    started = vector_client.responses.create(
        model="fake", input=searching("vacation", answer), tools=tools, background=True, stream=True
    )
    events = list(started)
    response_id = events[0].response.id
    ended = events[-1]
    assert ended.type == "response.completed"
    # Resumed from the search's first event: the same events, numbered alike.
    first_search = next(e for e in events if e.type == "response.file_search_call.in_progress")
    resumed = list(
        vector_client.responses.retrieve(response_id, stream=True, starting_after=first_search.sequence_number - 1)
    )
    assert [e.type for e in resumed] == [e.type for e in events[first_search.sequence_number :]]
    assert [e.model_dump(exclude={"obfuscation"}) for e in resumed] == [
        e.model_dump(exclude={"obfuscation"}) for e in events[first_search.sequence_number :]
    ]
    done = next(e for e in resumed if e.type == "response.output_item.done")
    assert done.item.type == "file_search_call" and done.item.results is None  # (its create had no include)
    kept = vector_client.responses.retrieve(response_id)
    assert [item.type for item in kept.output] == ["file_search_call", "message"]
    assert kept.output[0].results is None and resumed[-1].response.output[0].results is None
    assert kept.output[1].content[0].annotations[0].filename == "handbook.txt"
    # Kept whole all the same: a read that includes them sees them.
    asked = vector_client.responses.retrieve(response_id, include=["file_search_call.results"])
    assert asked.output[0].results and asked.output[0].results[0].filename == "handbook.txt"

    conversation = vector_client.conversations.create()
    vector_client.responses.create(
        model="fake", input=searching("vacation", answer), tools=tools, conversation=conversation.id
    )
    items = vector_client.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message", "file_search_call", "message"]
    assert items[1].results is None
    listed = vector_client.conversations.items.list(conversation.id, order="asc", include=["file_search_call.results"])
    assert listed.data[1].results[0].filename == "handbook.txt"
    later_turn = vector_client.responses.create(
        model="fake", input="And remote work?", tools=tools, conversation=conversation.id
    )
    later = fake.requests()[-1]["messages"]
    search_result = next(m for m in later if m["role"] == "tool")
    # The model reads the earlier search's results again, without include, and without its markers.
    assert "thirty days of paid vacation" in search_result["content"] and "【" not in search_result["content"]
    assert later_turn.status == "completed"
    search_id = str(items[1].id)
    one = vector_client.conversations.items.retrieve(search_id, conversation_id=conversation.id)
    assert one.type == "file_search_call" and one.results is None
    one = vector_client.conversations.items.retrieve(
        search_id, conversation_id=conversation.id, include=["file_search_call.results"]
    )
    assert one.type == "file_search_call" and one.results and one.results[0].filename == "handbook.txt"


def test_a_response_cancelled_while_it_searches_ends_cancelled(vector_client: openai.OpenAI, fake: FakeRuntime) -> None:
    store: Any = vector_client.post(
        "/vector_stores", body={"name": "slow", "embedding_model": "remote-embedder"}, cast_to=dict[str, Any]
    )
    made = vector_client.files.create(file=("notes.txt", b"notes about vacation"), purpose="assistants")
    attached = vector_client.vector_stores.files.create_and_poll(
        file_id=made.id, vector_store_id=store["id"], poll_interval_ms=100
    )
    assert attached.status == "completed"
    slow_query = json.dumps({"queries": ["slow-embedding vacation"]})  # its embedding takes half a second
    started = vector_client.responses.create(
        model="fake",
        input=script(tool_calls=[{"name": "file_search", "arguments": slow_query}], then={"text": "Never said."}),
        tools=[{"type": "file_search", "vector_store_ids": [store["id"]]}],
        background=True,
    )
    deadline = time.monotonic() + 10
    while vector_client.responses.retrieve(started.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.02)
    cancelled = vector_client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    time.sleep(1)  # (the search's answer comes, and finds its response ended)
    ended = vector_client.responses.retrieve(started.id)
    assert ended.status == "cancelled" and "Never said." not in json.dumps(ended.model_dump())
    assert len(fake.requests()) == 1  # the model was not asked again

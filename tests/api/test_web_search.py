"""`web_search` run by the server against a SearXNG instance (a stand-in on a loopback port): the
model calls it, a `web_search_call` item with its three events in OpenAI's order (the item added
without its action, done with it), the sources and results kept but shown only under `include`,
the model's citation markers turned into `url_citation` annotations over the sentence they close,
`allowed_domains` and `search_context_size` applied, a backend that fails telling the model, and
bad input refused. Without a backend (the plain server), the tool stays echoed and not offered."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.api.conftest import InProcess
from tests.conftest import FakeRuntime
from tests.searxng_stand_in import DOMAINS, SearxngStandIn


def script(**fields: Any) -> str:
    return "#fake " + json.dumps(fields)


def searching(query: str, then: dict[str, Any]) -> str:
    return script(tool_calls=[{"name": "web_search", "arguments": json.dumps({"query": query})}], then=then)


WEB_SEARCH: Any = {"type": "web_search"}
FORCED: Any = {"type": "web_search"}  # as tool_choice


def test_the_model_searches_the_web_and_its_citation_becomes_a_url_citation(
    web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    answer = {"chunks": ["Python is a language. It has ", "docs online", "【", "1】", ". Thanks."]}
    response = web_client.responses.create(model="fake", input=searching("python docs", answer), tools=[WEB_SEARCH])
    assert response.status == "completed"
    call, message = response.output
    assert call.type == "web_search_call" and call.id.startswith("ws_") and call.status == "completed"
    assert call.action.model_dump(exclude_none=True) == {
        "type": "search",
        "query": "python docs",
        "queries": ["python docs"],
    }
    text = message.content[0]
    assert text.text == "Python is a language. It has docs online. Thanks."
    [citation] = text.annotations
    assert citation.model_dump() == {
        "type": "url_citation",
        "url": "https://docs.python.org/0",
        "title": "python docs — docs.python.org",
        "start_index": 22,
        "end_index": 40,
    }
    assert text.text[citation.start_index : citation.end_index] == "It has docs online"
    assert searxng.queries[-1] == "python docs"
    offered = fake.requests()[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["web_search", "open_page", "find_in_page"]
    result = fake.requests()[1]["messages"][-1]
    assert result["role"] == "tool" and "【1】" in result["content"]
    assert "Passage 0 about python docs" in result["content"]
    assert result["content"].count("<result ") == 5  # search_context_size medium
    assert response.tools[0].model_dump(exclude_none=True) == {"type": "web_search", "search_context_size": "medium"}


def test_a_streamed_search_shows_its_events_in_order_and_no_marker(web_client: openai.OpenAI) -> None:
    answer = {"chunks": ["Found it", "【1", "】."]}
    with web_client.responses.stream(
        model="fake", input=searching("python", answer), tools=[WEB_SEARCH], include=["web_search_call.action.sources"]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert [k for k in kinds if "web_search_call" in k] == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "web_search_call" and added.item.status == "in_progress"
    assert added.item.model_dump(exclude_none=True).get("action") is None  # added without its action
    assert kinds.index("response.output_item.added") < kinds.index("response.web_search_call.in_progress")
    done = next(e for e in events if e.type == "response.output_item.done" and e.item.type == "web_search_call")
    assert kinds.index("response.web_search_call.completed") < events.index(done)
    assert done.item.action.type == "search" and len(done.item.action.sources or []) == 5
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Found it." and "【" not in deltas
    [annotated] = [e for e in events if e.type == "response.output_text.annotation.added"]
    shown = annotated.annotation if isinstance(annotated.annotation, dict) else annotated.annotation.model_dump()
    assert shown["type"] == "url_citation" and (shown["start_index"], shown["end_index"]) == (0, 8)
    assert final.output[0].action.sources is not None


def test_sources_and_results_are_kept_and_shown_only_where_include_asks(web_client: openai.OpenAI) -> None:
    response = web_client.responses.create(model="fake", input=searching("python", {"text": "Ok."}), tools=[WEB_SEARCH])
    assert response.output[0].action.sources is None
    assert "results" not in response.output[0].model_dump()
    shown = web_client.responses.retrieve(
        response.id, include=["web_search_call.action.sources", "web_search_call.results"]
    )
    call = shown.output[0].model_dump()
    assert [s["url"] for s in call["action"]["sources"]] == [f"https://{d}/{n}" for n, d in enumerate(_domains(5))]
    assert [r["url"] for r in call["results"]] == [s["url"] for s in call["action"]["sources"]]
    assert call["results"][0]["snippet"] == "Passage 0 about python, from docs.python.org."
    only_sources = web_client.responses.retrieve(response.id, include=["web_search_call.action.sources"])
    assert "results" not in only_sources.output[0].model_dump()
    assert web_client.responses.retrieve(response.id).output[0].action.sources is None


def _domains(count: int) -> list[str]:
    return list(DOMAINS[:count])


def test_allowed_domains_keep_other_results_out_and_one_domain_scopes_the_query(
    web_client: openai.OpenAI, searxng: SearxngStandIn, fake: FakeRuntime
) -> None:
    tool: Any = {"type": "web_search", "filters": {"allowed_domains": ["python.org", "https://www.w3.org/"]}}
    response = web_client.responses.create(
        model="fake", input=searching("html", {"text": "Ok."}), tools=[tool], include=["web_search_call.action.sources"]
    )
    sources = [s.url for s in response.output[0].action.sources or []]
    assert sources == ["https://docs.python.org/0", "https://python.org/4", "https://w3.org/5"]  # (subdomains too)
    assert searxng.queries[-1] == "html"
    one: Any = {"type": "web_search", "filters": {"allowed_domains": ["wikipedia.org"]}, "search_context_size": "low"}
    scoped = web_client.responses.create(
        model="fake", input=searching("css", {"text": "Ok."}), tools=[one], include=["web_search_call.action.sources"]
    )
    assert searxng.queries[-1] == "site:wikipedia.org css"
    assert [s.url for s in scoped.output[0].action.sources or []] == ["https://en.wikipedia.org/1"]
    assert fake.requests()[-1]["messages"][-1]["content"].count("<result ") == 1


@pytest.mark.parametrize(
    ("query", "told"),
    [
        ("down", "HTTP 500"),
        ("slow", "did not answer in time"),
        ("garbage", "did not answer JSON"),
        ("shapeless", "no list of results"),
        ("refusing", "needs json in search.formats"),
        ("enormous", "answer was too large"),
    ],
)
def test_a_failing_backend_fails_the_call_tells_the_model_and_the_response_goes_on(
    web_client: openai.OpenAI, searxng: SearxngStandIn, fake: FakeRuntime, query: str, told: str
) -> None:
    asked = len(searxng.queries)
    response = web_client.responses.create(
        model="fake", input=searching(query, {"text": "I could not search."}), tools=[WEB_SEARCH]
    )
    assert response.status == "completed"
    call, message = response.output
    assert call.status == "failed" and call.action.query == query and call.action.sources is None
    assert message.content[0].text == "I could not search."
    result = fake.requests()[1]["messages"][-1]["content"]
    assert "The web search failed" in result and told in result and "127.0.0.1" not in result
    assert len(searxng.queries) == asked + 1  # asked once, not again


def test_codex_s_cached_mode_and_the_agents_sdk_s_fields_are_served(
    web_client: openai.OpenAI, fake: FakeRuntime
) -> None:
    codex = web_client.responses.create(
        model="fake",
        input=searching("news", {"text": "Ok."}),
        tools=[{"type": "web_search", "external_web_access": False}],
    )
    assert [i.type for i in codex.output] == ["web_search_call", "message"]
    assert [t["function"]["name"] for t in fake.requests()[-2]["tools"]] == ["web_search"]  # no live page
    agents: Any = {
        "type": "web_search",
        "filters": None,
        "user_location": None,
        "search_context_size": "high",
    }
    high = web_client.responses.create(
        model="fake",
        input=searching("news", {"text": "Ok."}),
        tools=[agents],
        include=["web_search_call.action.sources"],
    )
    assert len(high.output[0].action.sources or []) == 6  # all the stand-in has: high asks for 10
    preview = web_client.responses.create(
        model="fake",
        input=searching("news", {"text": "Ok."}),
        tools=[{"type": "web_search_preview", "user_location": {"type": "approximate", "country": "DE"}}],
    )
    assert preview.output[0].type == "web_search_call" and preview.tools[0].type == "web_search_preview"


def test_tool_choice_and_max_tool_calls_reach_the_search(web_client: openai.OpenAI, fake: FakeRuntime) -> None:
    web_client.responses.create(
        model="fake", input=searching("x", {"text": "Ok."}), tools=[WEB_SEARCH], tool_choice=FORCED
    )
    assert fake.requests()[0]["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    twice = [{"name": "web_search", "arguments": json.dumps({"query": q})} for q in ("one", "two")]
    capped = web_client.responses.create(
        model="fake", input=script(tool_calls=twice, then={"text": "Done."}), tools=[WEB_SEARCH], max_tool_calls=1
    )
    assert [item.type for item in capped.output] == ["web_search_call", "message"]
    assert capped.output[0].action.query == "one"


def test_a_later_turn_reads_the_earlier_results_and_a_replayed_call_is_accepted(
    web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    first = web_client.responses.create(model="fake", input=searching("tea", {"text": "Tea."}), tools=[WEB_SEARCH])
    asked = len(searxng.queries)
    web_client.responses.create(model="fake", input="And coffee?", previous_response_id=first.id, tools=[WEB_SEARCH])
    messages = fake.requests()[-1]["messages"]
    call = next(m for m in messages if m.get("tool_calls"))
    assert call["tool_calls"][0]["function"] == {"name": "web_search", "arguments": '{"query": "tea"}'}
    earlier = next(m for m in messages if m["role"] == "tool")["content"]
    assert "Passage 0 about tea" in earlier and "【" not in earlier  # (cited in its own turn only)
    assert len(searxng.queries) == asked  # not searched again
    replayed: Any = [
        {"role": "user", "content": "What is new?"},
        {
            "type": "web_search_call",
            "id": "ws_from_codex",
            "status": "completed",
            "action": {"type": "search", "query": "what is new", "sources": [{"type": "url", "url": "https://x.org"}]},
        },
        {"type": "web_search_call", "id": "ws_old", "status": "completed", "action": {"type": "find", "url": None}},
        {"role": "assistant", "content": "Nothing."},
        {"role": "user", "content": "Thanks."},
    ]
    response = web_client.responses.create(model="fake", input=replayed, tools=[WEB_SEARCH], store=False)
    assert response.status == "completed" and len(searxng.queries) == asked
    tools_said = [m["content"] for m in fake.requests()[-1]["messages"] if m["role"] == "tool"]
    assert tools_said[0] == "Searched the web for: what is new"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search", "filters": {"allowed_domains": ["https://"]}}, "tools[0].filters.allowed_domains[0]"),
        ({"type": "web_search", "filters": {"blocked_domains": ["x.org"]}}, "tools[0].filters.blocked_domains"),
        ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
        ({"type": "web_search", "user_location": {"type": "exact"}}, "tools[0].user_location.type"),
        ({"type": "web_search_preview", "filters": {"allowed_domains": ["x.org"]}}, "tools[0].filters"),
    ],
)
def test_a_malformed_tool_is_a_400_naming_it(web_client: openai.OpenAI, tool: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        web_client.responses.create(model="fake", input="hi", tools=[tool])  # type: ignore[list-item]
    assert refused.value.body["param"] == param


def test_two_web_search_tools_or_a_choice_of_one_not_given_are_400s(web_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        web_client.responses.create(model="fake", input="hi", tools=[WEB_SEARCH, {"type": "web_search_preview"}])
    assert refused.value.body["param"] == "tools[1]"
    with pytest.raises(openai.BadRequestError) as refused:
        web_client.responses.create(model="fake", input="hi", tool_choice=FORCED)
    assert refused.value.body["param"] == "tool_choice"


def test_without_a_backend_the_tool_is_echoed_not_offered_and_ready_says_why(
    client: openai.OpenAI, fake: FakeRuntime, server: InProcess, web_server: InProcess
) -> None:
    response = client.responses.create(
        model="fake", input="hi", tools=[{"type": "web_search", "external_web_access": False}]
    )
    assert response.status == "completed" and response.tools[0].type == "web_search"
    assert "tools" not in fake.requests()[-1]
    assert server.http.get("/ready").json()["web_search"].startswith("off: RESPONSES_WEB_SEARCH_URL is not set")
    assert web_server.http.get("/ready").json()["web_search"].startswith("ok")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", input="hi", tools=[WEB_SEARCH], tool_choice=FORCED)
    assert refused.value.body["param"] == "tool_choice"


def opening(function: str, then: dict[str, Any], **arguments: str) -> str:
    return script(tool_calls=[{"name": function, "arguments": json.dumps(arguments)}], then=then)


def test_a_page_is_opened_through_the_egress_guard_and_cited(
    web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    url = f"{searxng.url}/pages/tea"
    answer = {"chunks": ["Tea reached Portugal from Macau", "【1】", "."]}
    with web_client.responses.stream(
        model="fake", input=opening("open_page", answer, url=url), tools=[WEB_SEARCH]
    ) as stream:
        events = list(stream)
        response = stream.get_final_response()
    call, message = response.output
    assert call.type == "web_search_call" and call.status == "completed"
    assert call.action.model_dump(exclude_none=True) == {"type": "open_page", "url": url}
    assert [e.type for e in events if "web_search_call" in e.type] == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]
    told = fake.requests()[-1]["messages"][-1]["content"]
    assert 'marker="【1】" title="All about tea"' in told and "Tea came to Portugal from Macau" in told
    assert "<p>" not in told  # (the page's text, not its markup)
    [citation] = message.content[0].annotations
    assert citation.model_dump() == {
        "type": "url_citation",
        "url": url,
        "title": "All about tea",
        "start_index": 0,
        "end_index": 31,
    }
    later = web_client.responses.create(
        model="fake", input="And?", previous_response_id=response.id, tools=[WEB_SEARCH]
    )
    assert later.status == "completed"
    replayed = next(m for m in fake.requests()[-1]["messages"] if m.get("tool_calls"))
    assert replayed["tool_calls"][0]["function"] == {"name": "open_page", "arguments": json.dumps({"url": url})}


def test_a_pattern_is_found_in_a_page(web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn) -> None:
    url = f"{searxng.url}/pages/tea"
    response = web_client.responses.create(
        model="fake",
        input=opening("find_in_page", {"text": "Ok."}, url=url, pattern="GREEN TEA"),
        tools=[WEB_SEARCH],
        include=["web_search_call.results"],
    )
    call = response.output[0]
    assert call.action.model_dump(exclude_none=True) == {"type": "find_in_page", "url": url, "pattern": "GREEN TEA"}
    [found] = call.model_dump()["results"]
    assert "Green tea is steamed" in found["snippet"] and found["title"] == "All about tea"
    missing = web_client.responses.create(
        model="fake", input=opening("find_in_page", {"text": "Ok."}, url=url, pattern="rooibos"), tools=[WEB_SEARCH]
    )
    assert missing.output[0].status == "completed"
    assert fake.requests()[-1]["messages"][-1]["content"] == "'rooibos' is not in the page."


@pytest.mark.parametrize(
    ("page", "told"),
    [
        ("binary", "the page is not text"),
        ("huge", "larger than 100,000 bytes"),
        ("gone", "HTTP 404"),
    ],
)
def test_a_page_that_cannot_be_read_fails_the_call_and_the_model_is_told(
    web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn, page: str, told: str
) -> None:
    response = web_client.responses.create(
        model="fake", input=opening("open_page", {"text": "Ok."}, url=f"{searxng.url}/pages/{page}"), tools=[WEB_SEARCH]
    )
    assert response.status == "completed" and response.output[0].status == "failed"
    said = fake.requests()[-1]["messages"][-1]["content"]
    assert said.startswith("The web search failed") and told in said


@pytest.mark.parametrize(
    ("tool", "url", "told"),
    [
        ({"type": "web_search", "filters": {"allowed_domains": ["python.org"]}}, "{stand_in}/pages/tea", "domains"),
        ({"type": "web_search"}, "http://10.1.2.3/pages/tea", "an address this server does not connect to"),
        ({"type": "web_search"}, "file:///etc/passwd", "http:// or https://"),
    ],
)
def test_a_page_outside_the_domains_or_the_guard_is_not_fetched(
    web_client: openai.OpenAI,
    fake: FakeRuntime,
    searxng: SearxngStandIn,
    tool: dict[str, Any],
    url: str,
    told: str,
) -> None:
    fetched = len(searxng.pages)
    given: Any = tool
    response = web_client.responses.create(
        model="fake",
        input=opening("open_page", {"text": "Ok."}, url=url.format(stand_in=searxng.url)),
        tools=[given],
    )
    assert response.output[0].status == "failed" and len(searxng.pages) == fetched
    assert told in fake.requests()[-1]["messages"][-1]["content"]


def test_a_conversation_keeps_the_search_and_shows_its_sources_only_where_asked(
    web_client: openai.OpenAI, fake: FakeRuntime, searxng: SearxngStandIn
) -> None:
    conversation = web_client.conversations.create()
    web_client.responses.create(
        model="fake", input=searching("tea", {"text": "Tea."}), tools=[WEB_SEARCH], conversation=conversation.id
    )
    asked = len(searxng.queries)
    web_client.responses.create(model="fake", input="And coffee?", tools=[WEB_SEARCH], conversation=conversation.id)
    earlier = [m for m in fake.requests()[-1]["messages"] if m["role"] == "tool"]
    assert len(earlier) == 1 and "Passage 0 about tea" in earlier[0]["content"] and len(searxng.queries) == asked
    items = web_client.conversations.items.list(conversation.id, order="asc").data
    [call] = [item for item in items if item.type == "web_search_call"]
    assert call.model_dump()["action"].get("sources") is None and "results" not in call.model_dump()
    shown = web_client.conversations.items.list(
        conversation.id, order="asc", include=["web_search_call.action.sources"]
    ).data
    [call] = [item for item in shown if item.type == "web_search_call"]
    assert len(call.model_dump()["action"]["sources"]) == 5

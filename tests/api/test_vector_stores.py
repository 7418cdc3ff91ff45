"""Vector stores through the OpenAI SDK on a Postgres with pgvector: files uploaded and polled to
their end, searched by meaning and by words, filtered by attributes; batches, cancel, detach and
delete keep the counts right and leave no chunk behind."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import openai
import pytest

from app.housekeeping import retention
from app.storage import chunks as chunks_db
from app.storage.engine import create_engine
from tests.conftest import Environment
from tests.documents import pdf

HANDBOOK = (
    "Vacation policy. Every employee receives thirty days of paid vacation per year. "
    "Unused vacation days carry over to the next year, up to ten days.\n\n"
    "Remote work. Employees may work from home on Mondays and Fridays. "
    "The office in Lisbon opens at eight in the morning.\n\n"
    "Expenses. Travel costs are reimbursed within two weeks when receipts are attached."
)


def test_a_file_is_uploaded_ingested_and_found_by_meaning(vector_client: openai.OpenAI) -> None:
    store = vector_client.vector_stores.create(name="handbook")
    assert store.object == "vector_store" and store.status == "completed" and store.file_counts.total == 0
    attached = vector_client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("handbook.txt", HANDBOOK.encode()), poll_interval_ms=100
    )
    assert attached.status == "completed" and attached.last_error is None and attached.usage_bytes > 0
    found = vector_client.vector_stores.search(store.id, query="How many days off do I get?")
    assert found.data[0].filename == "handbook.txt" and 0 < found.data[0].score <= 1
    assert "thirty days of paid vacation" in found.data[0].content[0].text
    refreshed = vector_client.vector_stores.retrieve(store.id)
    assert refreshed.file_counts.completed == 1 and refreshed.file_counts.in_progress == 0
    assert refreshed.usage_bytes == attached.usage_bytes and refreshed.status == "completed"


def _count(environment: Environment, sql: str, *args: object) -> int:
    return int(environment.query(sql, *args)[0][0])


def test_each_embedding_length_has_one_vector_index_with_the_servers_graph(
    vector_client: openai.OpenAI, vector_environment: Environment
) -> None:
    vector_client.vector_stores.create(name="indexed")
    rows = vector_environment.query(
        "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'ix_chunks_embedding_%'"
    )
    assert {row["indexname"] for row in rows} >= {"ix_chunks_embedding_384", "ix_chunks_embedding_8"}
    for row in rows:  # (a million chunks need the larger graph for 0.95 of the exact top 10)
        assert "hnsw" in row["indexdef"] and "m='32'" in row["indexdef"] and "ef_construction='128'" in row["indexdef"]


def test_a_batch_is_polled_until_no_file_is_in_progress_and_its_counts_add_up(vector_client: openai.OpenAI) -> None:
    store = vector_client.vector_stores.create(name="mixed")
    batch = vector_client.vector_stores.file_batches.upload_and_poll(
        store.id,
        files=[
            ("guide.pdf", pdf("Printers are on the second floor.", "Badges open the garage.")),
            ("picture.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64),
            ("broken.pdf", b"%PDF-1.4 this is not a document"),
        ],
        poll_interval_ms=100,
    )
    assert batch.object == "vector_store.files_batch" and batch.status == "completed"
    counts = batch.file_counts
    assert (counts.in_progress, counts.completed, counts.failed, counts.cancelled, counts.total) == (0, 1, 2, 0, 3)
    failed = vector_client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, filter="failed")
    errors = sorted((f.last_error.code, f.status) for f in failed.data if f.last_error is not None)
    assert errors == [("invalid_file", "failed"), ("unsupported_file", "failed")]
    assert all(f.usage_bytes == 0 for f in failed.data)
    done = vector_client.vector_stores.files.list(store.id, filter="completed").data
    assert len(done) == 1 and done[0].usage_bytes > 0
    text = "".join(
        part.text or "" for part in vector_client.vector_stores.files.content(done[0].id, vector_store_id=store.id)
    )
    assert "[page 1]" in text and "Badges open the garage." in text
    assert vector_client.vector_stores.retrieve(store.id).file_counts.model_dump() == counts.model_dump()


def _ready_store(client: openai.OpenAI, files: list[tuple[str, str, dict[str, Any]]], **create: Any) -> str:
    """A store holding these (name, text, attributes), every one ingested."""
    store = client.vector_stores.create(**create)
    for name, text, attributes in files:
        uploaded = client.files.create(file=(name, text.encode()), purpose="assistants")
        attached = client.vector_stores.files.create_and_poll(
            file_id=uploaded.id, vector_store_id=store.id, attributes=attributes, poll_interval_ms=100
        )
        assert attached.status == "completed", attached.last_error
    return store.id


NOTES = [
    ("hr-2023.txt", "The holiday party in 2023 was held in Porto.", {"team": "hr", "year": 2023, "public": True}),
    ("hr-2024.txt", "The holiday party in 2024 was held in Lisbon.", {"team": "hr", "year": 2024, "public": False}),
    ("eng-2024.txt", "The build server was upgraded to new GPUs in 2024.", {"team": "eng", "year": 2024}),
]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"type": "eq", "key": "team", "value": "hr"}, {"hr-2023.txt", "hr-2024.txt"}),
        ({"type": "ne", "key": "team", "value": "hr"}, {"eng-2024.txt"}),
        ({"type": "gte", "key": "year", "value": 2024}, {"hr-2024.txt", "eng-2024.txt"}),
        ({"type": "lt", "key": "year", "value": 2024.5}, {"hr-2023.txt", "hr-2024.txt", "eng-2024.txt"}),
        ({"type": "in", "key": "team", "value": ["eng", "ops"]}, {"eng-2024.txt"}),
        ({"type": "nin", "key": "year", "value": [2023]}, {"hr-2024.txt", "eng-2024.txt"}),
        ({"type": "eq", "key": "public", "value": True}, {"hr-2023.txt"}),
        (
            {
                "type": "and",
                "filters": [{"type": "eq", "key": "team", "value": "hr"}, {"type": "eq", "key": "year", "value": 2024}],
            },
            {"hr-2024.txt"},
        ),
        (
            {
                "type": "or",
                "filters": [
                    {"type": "eq", "key": "team", "value": "eng"},
                    {"type": "lt", "key": "year", "value": 2024},
                ],
            },
            {"hr-2023.txt", "eng-2024.txt"},
        ),
    ],
)
def test_search_keeps_only_files_whose_attributes_pass_the_filter(
    vector_client: openai.OpenAI, filters: Any, expected: set[str]
) -> None:
    store_id = _ready_store(vector_client, NOTES)
    found = vector_client.vector_stores.search(store_id, query="Where was the party?", filters=filters)
    assert {hit.filename for hit in found.data} == expected
    assert all(hit.attributes == dict(next(a for n, _, a in NOTES if n == hit.filename)) for hit in found.data)


def test_words_find_what_meaning_alone_ranks_low_and_scores_stay_in_zero_one(vector_client: openai.OpenAI) -> None:
    store_id = _ready_store(vector_client, NOTES)
    raw = vector_client.vector_stores.with_raw_response.search(store_id, query="Lisbon", max_num_results=3)
    assert raw.http_response.json()["search_query"] == ["Lisbon"]
    found = raw.parse()
    assert found.data[0].filename == "hr-2024.txt"
    scores = [hit.score for hit in found.data]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert len(scores) > 1 and scores[0] > scores[1]
    strict = vector_client.vector_stores.search(
        store_id, query="Lisbon", ranking_options={"score_threshold": (scores[0] + scores[1]) / 2}
    )
    assert [hit.filename for hit in strict.data] == ["hr-2024.txt"]
    several = vector_client.vector_stores.search(store_id, query=["Porto", "GPUs"], max_num_results=2)
    assert {hit.filename for hit in several.data} == {"hr-2023.txt", "eng-2024.txt"}
    semantic = vector_client.vector_stores.search(
        store_id, query="celebration venue", ranking_options={"ranker": "none"}
    )
    assert semantic.data and all(0 <= hit.score <= 1 for hit in semantic.data)


def test_another_accounts_store_and_files_answer_as_unknown_ones(
    vector_client: openai.OpenAI, other_vector_client: openai.OpenAI
) -> None:
    store_id = _ready_store(vector_client, NOTES[:1])
    for call in (
        lambda: other_vector_client.vector_stores.retrieve(store_id),
        lambda: other_vector_client.vector_stores.search(store_id, query="party"),
        lambda: other_vector_client.vector_stores.files.list(store_id),
        lambda: other_vector_client.vector_stores.delete(store_id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    theirs = other_vector_client.files.create(file=("theirs.txt", b"not yours"), purpose="assistants")
    with pytest.raises(openai.NotFoundError) as refused:
        vector_client.vector_stores.files.create(vector_store_id=store_id, file_id=theirs.id)
    assert refused.value.body["param"] == "file_id"
    assert store_id not in [s.id for s in other_vector_client.vector_stores.list()]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"embedding_model": "no-such-model"}, "embedding_model"),
        ({"embedding_model": "minilm", "embedding_dimension": 768}, "embedding_dimension"),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150},
                }
            },
            "chunking_strategy.static.chunk_overlap_tokens",
        ),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0},
                }
            },
            "chunking_strategy.static.max_chunk_size_tokens",
        ),
        ({"chunking_strategy": {"type": "static"}}, "chunking_strategy.static"),
        ({"expires_after": {"anchor": "created_at", "days": 3}}, "expires_after.anchor"),
        ({"file_ids": ["file-nope"]}, "file_ids[0]"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_a_bad_create_is_refused_naming_its_parameter_and_stores_nothing(
    vector_client: openai.OpenAI, vector_environment: Environment, body: dict[str, Any], param: str
) -> None:
    before = _count(vector_environment, "SELECT count(*) FROM vector_stores")
    with pytest.raises(openai.APIStatusError) as refused:
        vector_client.post("/vector_stores", body=body, cast_to=object)
    assert refused.value.status_code in (400, 404) and refused.value.body["param"] == param, refused.value.body
    assert _count(vector_environment, "SELECT count(*) FROM vector_stores") == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "max_num_results": 51}, "max_num_results"),
        ({"query": "word " * 1000}, "query"),  # (too long to embed on a request's time)
        ({"query": "x", "filters": {"type": "like", "key": "a", "value": "b"}}, "filters.type"),
        ({"query": "x", "filters": {"type": "in", "key": "a", "value": "b"}}, "filters.value"),
        ({"query": "x", "filters": {"type": "and", "filters": []}}, "filters.filters"),
        ({"query": "x", "filters": {"type": "gt", "key": "a", "value": True}}, "filters.value"),
        ({"query": "x", "ranking_options": {"score_threshold": 1.5}}, "ranking_options.score_threshold"),
    ],
)
def test_a_bad_search_is_refused_naming_its_parameter(
    vector_client: openai.OpenAI, body: dict[str, Any], param: str
) -> None:
    store = vector_client.vector_stores.create()
    with pytest.raises(openai.BadRequestError) as refused:
        vector_client.post(f"/vector_stores/{store.id}/search", body=body, cast_to=object)
    assert refused.value.body["param"] == param, refused.value.body


def test_detaching_deleting_a_file_or_its_store_leaves_no_chunk_and_counts_follow(
    vector_client: openai.OpenAI, vector_environment: Environment
) -> None:
    store_id = _ready_store(vector_client, NOTES)
    chunks_of = "SELECT count(*) FROM chunks WHERE vector_store_id = $1"
    assert _count(vector_environment, chunks_of, store_id) == 3
    files = {f.id: f for f in vector_client.vector_stores.files.list(store_id).data}
    first, second, third = list(files)
    gone = vector_client.vector_stores.files.delete(first, vector_store_id=store_id)
    assert (gone.id, gone.object, gone.deleted) == (first, "vector_store.file.deleted", True)
    assert vector_client.files.retrieve(first).id == first  # detached, not deleted
    vector_client.files.delete(second)  # deleted: detached from every store
    assert _count(vector_environment, chunks_of, store_id) == 1
    store = vector_client.vector_stores.retrieve(store_id)
    assert (store.file_counts.total, store.file_counts.completed) == (1, 1)
    assert [f.id for f in vector_client.vector_stores.files.list(store_id).data] == [third]
    deleted = vector_client.vector_stores.delete(store_id)
    assert (deleted.object, deleted.deleted) == ("vector_store.deleted", True)
    assert _count(vector_environment, chunks_of, store_id) == 0
    assert (
        _count(vector_environment, "SELECT count(*) FROM vector_store_files WHERE vector_store_id = $1", store_id) == 0
    )


def test_a_cancelled_batch_ends_every_file_it_had_not_ingested_and_keeps_their_chunks_out(
    vector_client: openai.OpenAI, vector_environment: Environment
) -> None:
    store = vector_client.vector_stores.create()
    ids = [
        vector_client.files.create(file=(f"n{i}.txt", HANDBOOK.encode() * 20), purpose="assistants").id
        for i in range(6)
    ]
    batch = vector_client.vector_stores.file_batches.create(store.id, file_ids=ids)
    cancelled = vector_client.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "cancelled"
    counts = cancelled.file_counts
    assert counts.in_progress == 0 and counts.cancelled + counts.completed == counts.total == 6
    done = {f.id for f in vector_client.vector_stores.files.list(store.id, filter="completed").data}
    with_chunks = {
        row[0]
        for row in vector_environment.query("SELECT DISTINCT file_id FROM chunks WHERE vector_store_id = $1", store.id)
    }
    assert with_chunks == done


def test_static_chunking_cuts_overlapping_chunks_and_is_echoed(vector_client: openai.OpenAI) -> None:
    words = " ".join(f"w{i}" for i in range(500))
    store = vector_client.vector_stores.create(
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50}}
    )
    uploaded = vector_client.files.create(file=("words.txt", words.encode()), purpose="assistants")
    attached = vector_client.vector_stores.files.create_and_poll(
        file_id=uploaded.id, vector_store_id=store.id, poll_interval_ms=100
    )
    assert attached.chunking_strategy.model_dump() == {
        "type": "static",
        "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50},
    }
    pieces = [part.text for part in vector_client.vector_stores.files.content(uploaded.id, vector_store_id=store.id)]
    assert [p.split()[0] for p in pieces] == ["w0", "w150", "w300"]  # each a step of 150 after the last
    assert pieces[0].split()[-1] == "w199" and pieces[-1].split()[-1] == "w499"


def test_a_store_is_listed_modified_and_expires_after_its_days(vector_client: openai.OpenAI) -> None:
    made = [vector_client.vector_stores.create(name=f"s{i}", metadata={"n": str(i)}).id for i in range(3)]
    first = vector_client.vector_stores.list(order="asc", limit=2, after=made[0])
    assert [s.id for s in first.data] == made[1:3]
    before = vector_client.vector_stores.list(order="desc", before=made[0], limit=1)
    assert [s.id for s in before.data] == [made[1]]
    changed = vector_client.vector_stores.update(
        made[0], name="renamed", metadata={"k": "v"}, expires_after={"anchor": "last_active_at", "days": 2}
    )
    assert (changed.name, changed.metadata, changed.expires_after.days) == ("renamed", {"k": "v"}, 2)
    assert changed.expires_at is not None and changed.last_active_at is not None
    assert abs(changed.expires_at - changed.last_active_at - 2 * 86400) <= 1
    unexpiring = vector_client.vector_stores.update(made[0], expires_after=None)
    assert unexpiring.expires_after is None and unexpiring.expires_at is None and unexpiring.name == "renamed"


def test_a_store_of_an_external_embedding_model_is_embedded_there(vector_client: openai.OpenAI) -> None:
    store = vector_client.post(
        "/vector_stores", body={"name": "remote", "embedding_model": "remote-embedder"}, cast_to=dict[str, Any]
    )
    good = vector_client.files.create(file=("cats.txt", b"cats purr and sleep all day"), purpose="assistants")
    bad = vector_client.files.create(file=("bad.txt", b"this says fail-embedding to the server"), purpose="assistants")
    ok = vector_client.vector_stores.files.create_and_poll(
        file_id=good.id, vector_store_id=store["id"], poll_interval_ms=100
    )
    failed = vector_client.vector_stores.files.create_and_poll(
        file_id=bad.id, vector_store_id=store["id"], poll_interval_ms=100
    )
    assert ok.status == "completed"
    assert failed.status == "failed" and failed.last_error is not None and failed.last_error.code == "server_error"
    found = vector_client.vector_stores.search(store["id"], query="cats purr")
    assert [hit.filename for hit in found.data] == ["cats.txt"]


def test_without_pgvector_vector_stores_say_so_and_everything_else_works(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.vector_stores.create(name="nowhere")
    assert refused.value.body["code"] == "vector_stores_unavailable" and "pgvector" in refused.value.body["message"]
    assert client.files.create(file=("still.txt", b"files work"), purpose="user_data").bytes == 10


def test_an_expired_store_says_so_refuses_search_and_is_removed_a_day_later(
    vector_client: openai.OpenAI, vector_environment: Environment
) -> None:
    store_id = _ready_store(vector_client, NOTES[:1], expires_after={"anchor": "last_active_at", "days": 1})
    expire = "UPDATE vector_stores SET expires_at = now() - CAST($2 AS interval) WHERE id = $1"
    vector_environment.query(expire, store_id, timedelta(hours=1))
    assert vector_client.vector_stores.retrieve(store_id).status == "expired"
    with pytest.raises(openai.BadRequestError) as refused:
        vector_client.vector_stores.search(store_id, query="party")
    assert refused.value.body["code"] == "vector_store_expired"
    vector_environment.query(
        "UPDATE vector_stores SET expires_at = now() - interval '25 hours' WHERE id = $1", store_id
    )

    async def sweep() -> None:
        engine = create_engine(vector_environment.settings(), pool_size=1, max_overflow=0)
        try:
            policy = retention.RetentionPolicy.from_settings(vector_environment.settings())
            await retention.run_step(engine, policy, next(s for s in retention.STEPS if s.name == "vector_stores"))
        finally:
            await engine.dispose()

    asyncio.run(sweep())
    with pytest.raises(openai.NotFoundError):
        vector_client.vector_stores.retrieve(store_id)
    assert _count(vector_environment, "SELECT count(*) FROM chunks WHERE vector_store_id = $1", store_id) == 0


def test_the_word_ranking_finds_a_passage_that_holds_some_of_a_questions_words(
    vector_client: openai.OpenAI, vector_environment: Environment
) -> None:
    store_id = _ready_store(vector_client, NOTES)

    async def by_words(question: str) -> list[str]:
        engine = create_engine(vector_environment.settings(), pool_size=1, max_overflow=0)
        try:
            async with engine.begin() as conn:
                found = await chunks_db.search(
                    conn,
                    [store_id],
                    [chunks_db.Query(None, question)],
                    limit=3,
                    filters=None,
                    score_threshold=0.0,
                )
        finally:
            await engine.dispose()
        return [hit.filename for hit in found]

    # ("came" is in no file: a search for all the words would find nothing)
    assert asyncio.run(by_words("Where was the holiday party held in 2024, and who came?"))[:2] == [
        "hr-2024.txt",
        "hr-2023.txt",
    ]
    assert asyncio.run(by_words("the of and")) == []  # stop words alone match nothing

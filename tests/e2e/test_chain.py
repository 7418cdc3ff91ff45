"""previous_response_id chains, input_items pagination, and delete."""

from __future__ import annotations

import subprocess
import threading

import httpx
import openai
import pytest

from tests.conftest import Environment, FakeRuntime, Server, wait_until


def sent_contents(fake: FakeRuntime, index: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in fake.requests()[index]["messages"]]


def test_chain_gives_the_model_every_turn_and_not_old_instructions(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input="one", instructions="First rules.")
    second = client.responses.create(model="fake", input="two", previous_response_id=first.id)
    client.responses.create(model="fake", input="three", previous_response_id=second.id, instructions="Third rules.")
    assert sent_contents(fake, 1) == [("user", "one"), ("assistant", "Echo: one"), ("user", "two")]
    assert sent_contents(fake, 2) == [
        ("system", "Third rules."),
        ("user", "one"),
        ("assistant", "Echo: one"),
        ("user", "two"),
        ("assistant", "Echo: two"),
        ("user", "three"),
    ]
    assert second.previous_response_id == first.id


def test_context_is_stored_once_not_copied_per_turn(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    previous: str | None = None
    ids = []
    for turn in range(5):
        previous = client.responses.create(model="fake", input=f"turn {turn}", previous_response_id=previous).id
        ids.append(previous)
    rows = environment.query("SELECT count(*) AS n FROM items WHERE response_id = ANY($1)", ids)
    assert rows[0]["n"] == 10  # one input and one output per turn, however long the chain


@pytest.mark.parametrize("case", ["unknown", "foreign", "unstored", "deleted"])
def test_previous_response_that_cannot_be_used_is_400(
    case: str, client: openai.OpenAI, other_client: openai.OpenAI, fake: FakeRuntime
) -> None:
    if case == "unknown":
        previous_id = "resp_" + "0" * 48
    elif case == "foreign":
        previous_id = other_client.responses.create(model="fake", input="theirs").id
    elif case == "unstored":
        previous_id = client.responses.create(model="fake", input="x", store=False).id
    else:
        previous_id = client.responses.create(model="fake", input="x").id
        client.responses.delete(previous_id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fake", input="next", previous_response_id=previous_id)
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"
    assert caught.value.body["message"] == f"Previous response with id '{previous_id}' not found."


def test_input_items_list_the_whole_context_newest_first(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input="one")
    second = client.responses.create(
        model="fake",
        previous_response_id=first.id,
        input=[{"role": "user", "content": "two"}, {"role": "user", "content": "2b"}],
    )
    page = client.responses.input_items.list(second.id)
    texts = [item.content[0].text for item in page.data]
    assert texts == ["2b", "two", "Echo: one", "one"]
    assert page.data[2].id == first.output[0].id  # the stored output item, with its own id
    assert page.has_more is False
    listing = page.model_dump()  # first_id / last_id are not on the SDK's page type, but on the wire
    assert listing["first_id"] == page.data[0].id and listing["last_id"] == page.data[-1].id
    asc = client.responses.input_items.list(second.id, order="asc")
    assert [i.id for i in asc.data] == [i.id for i in reversed(page.data)]
    user_item = page.data[0].model_dump()
    assert user_item["type"] == "message" and user_item["role"] == "user" and user_item["status"] == "completed"
    assert user_item["id"].startswith("msg_")


def test_input_item_ids_are_stable(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input="stable")
    ids = [[i.id for i in client.responses.input_items.list(response.id).data] for _ in range(2)]
    assert ids[0] == ids[1] and len(ids[0]) == 1


def test_input_items_pagination_walks_every_item(client: openai.OpenAI, fake: FakeRuntime) -> None:
    response = client.responses.create(model="fake", input=[{"role": "user", "content": f"m{i}"} for i in range(7)])
    page = client.responses.input_items.list(response.id, limit=3, order="asc")
    assert len(page.data) == 3 and page.has_more is True
    walked = [item.content[0].text for item in page]  # the SDK follows `after`
    assert walked == [f"m{i}" for i in range(7)]
    after = client.responses.input_items.list(response.id, limit=2, order="asc", after=page.data[2].id)
    assert [i.content[0].text for i in after.data] == ["m3", "m4"]


def test_input_items_accepts_before_for_older_clients(
    server: Server, api_key: str, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response = client.responses.create(model="fake", input=[{"role": "user", "content": f"m{i}"} for i in range(4)])
    items = client.responses.input_items.list(response.id, order="asc").data
    body = httpx.get(
        f"{server.base_url}/responses/{response.id}/input_items",
        params={"order": "asc", "before": items[2].id},
        headers={"Authorization": f"Bearer {api_key}"},
    ).json()
    assert [i["id"] for i in body["data"]] == [items[0].id, items[1].id]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"after": "msg_nope"}, "after"),
        ({"before": "msg_nope"}, "before"),
    ],
)
def test_input_items_bad_parameters_are_400(
    params: dict[str, str | int], param: str, server: Server, api_key: str, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response = client.responses.create(model="fake", input="x")
    answer = httpx.get(
        f"{server.base_url}/responses/{response.id}/input_items",
        params=params,
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


def test_delete_then_everything_about_it_is_gone(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment, server: Server, api_key: str
) -> None:
    response = client.responses.create(model="fake", input="to delete")
    answer = httpx.delete(f"{server.base_url}/responses/{response.id}", headers={"Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 200
    assert answer.json() == {"id": response.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)
    for table in ("responses", "items", "response_events"):
        column = "id" if table == "responses" else "response_id"
        assert environment.query(f"SELECT 1 FROM {table} WHERE {column} = $1", response.id) == []


def test_deleting_a_middle_turn_keeps_the_rest_of_the_chain(client: openai.OpenAI, fake: FakeRuntime) -> None:
    first = client.responses.create(model="fake", input="one")
    second = client.responses.create(model="fake", input="two", previous_response_id=first.id)
    third = client.responses.create(model="fake", input="three", previous_response_id=second.id)
    client.responses.delete(second.id)
    assert client.responses.retrieve(third.id).previous_response_id == second.id  # echoed as sent
    texts = [i.content[0].text for i in client.responses.input_items.list(third.id, order="asc")]
    assert texts == ["one", "Echo: one", "three"]
    client.responses.create(model="fake", input="four", previous_response_id=third.id)
    assert sent_contents(fake) == [
        ("user", "one"),
        ("assistant", "Echo: one"),
        ("user", "three"),
        ("assistant", "Echo: three"),
        ("user", "four"),
    ]


def test_a_create_stuck_in_its_insert_holds_up_no_other(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment
) -> None:
    parent = client.responses.create(model="fake", input="the parent")
    # Continuing it must lock its row, which this holds for a while: that insert waits.
    locker = subprocess.Popen(
        [
            "psql",
            environment.database_url.replace("+asyncpg", ""),
            "-q",
            "-c",
            f"BEGIN; SELECT 1 FROM responses WHERE id = '{parent.id}' FOR UPDATE; SELECT pg_sleep(4); COMMIT;",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: environment.query(
                "SELECT 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(4)%' "
                "AND state = 'active' AND pid <> pg_backend_pid()"
            )
        )
        continued: list[openai.types.responses.Response] = []
        stuck = threading.Thread(
            target=lambda: continued.append(
                client.responses.create(model="fake", input="the child", previous_response_id=parent.id)
            )
        )
        stuck.start()
        wait_until(lambda: environment.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"))
        other = client.responses.create(model="fake", input="someone else")
        assert other.output_text == "Echo: someone else"
        assert locker.poll() is None  # answered while the other insert still waits
        stuck.join(20)
        assert continued and continued[0].output_text == "Echo: the child"
    finally:
        locker.wait(10)

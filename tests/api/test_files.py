"""The Files API through the OpenAI SDK: upload (every purpose, `expires_after` as the SDK encodes
it), list with its cursor, `purpose` and `order`, retrieve, content, delete; accounts as walls;
limits; and bad uploads refused with a 4xx naming the parameter, nothing kept."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.housekeeping import retention
from app.storage.engine import create_engine
from tests.api.conftest import InProcess
from tests.conftest import Environment, key_of


def _files_of(environment: Environment, api_key: str) -> int:
    """The files (and their pieces) stored for the account whose key this is."""
    [row] = environment.query(
        "SELECT count(DISTINCT f.id) AS files, count(p.seq) AS pieces FROM files f "
        "JOIN api_keys k ON k.account_id = f.account_id LEFT JOIN file_pieces p ON p.file_id = f.id "
        "WHERE k.key_hash = encode(sha256($1::bytea), 'hex')",
        api_key.encode(),
    )
    return int(row["files"]) + int(row["pieces"])


def test_a_file_is_uploaded_retrieved_listed_read_back_and_deleted(client: openai.OpenAI) -> None:
    data = b"Our handbook: vacation is 30 days.\n"
    created = client.files.create(file=("handbook.txt", data, "text/plain"), purpose="user_data")
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.bytes, created.filename, created.purpose, created.status) == (
        len(data),
        "handbook.txt",
        "user_data",
        "processed",
    )
    assert abs(created.created_at - time.time()) < 60 and created.expires_at is None
    assert client.files.retrieve(created.id).model_dump() == created.model_dump()
    assert created.id in [f.id for f in client.files.list(purpose="user_data")]
    content = client.files.content(created.id)
    assert content.read() == data and content.response.headers["content-type"].startswith("text/plain")
    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "file", True)
    for gone in (lambda: client.files.retrieve(created.id), lambda: client.files.content(created.id)):
        with pytest.raises(openai.NotFoundError):
            gone()
    with pytest.raises(openai.NotFoundError):
        client.files.delete(created.id)


def test_a_file_of_many_pieces_reads_back_byte_for_byte(client: openai.OpenAI, environment: Environment) -> None:
    data = secrets.token_bytes(3 * 1024 * 1024 + 12345)  # three whole pieces of 1 MiB and a part
    created = client.files.create(file=("blob.bin", data), purpose="assistants")
    assert client.files.content(created.id).read() == data
    [row] = environment.query(
        "SELECT f.sha256, count(p.seq) AS pieces, max(length(p.data)) AS largest FROM files f "
        "JOIN file_pieces p ON p.file_id = f.id WHERE f.id = $1 GROUP BY f.sha256",
        created.id,
    )
    assert (row["sha256"], row["pieces"], row["largest"]) == (hashlib.sha256(data).hexdigest(), 4, 1024 * 1024)


def test_every_purpose_is_taken_and_expiry_follows_expires_after(client: openai.OpenAI) -> None:
    for purpose in ("assistants", "vision", "user_data", "evals", "fine-tune"):
        made = client.files.create(file=(f"{purpose}.jsonl", b"{}\n"), purpose=purpose)
        assert made.purpose == purpose and made.expires_at is None
    batch = client.files.create(file=("batch.jsonl", b"{}\n"), purpose="batch")
    assert batch.expires_at is not None and abs(batch.expires_at - batch.created_at - 30 * 86400) <= 1
    hour = client.files.create(
        file=("brief.txt", b"soon gone"),
        purpose="user_data",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert hour.expires_at is not None and abs(hour.expires_at - hour.created_at - 3600) <= 1
    assert client.files.retrieve(hour.id).expires_at == hour.expires_at


def test_files_are_listed_page_by_page_both_ways(client: openai.OpenAI) -> None:
    made = [client.files.create(file=(f"page-{n}.txt", b"x"), purpose="vision").id for n in range(5)]
    newest_first = [f.id for f in client.files.list(purpose="vision") if f.id in made]
    assert newest_first == made[::-1]
    first = client.files.list(purpose="vision", order="asc", limit=2)
    mine = [f.id for f in first.data]
    assert first.has_more
    after = first.data[-1].id
    while True:
        page = client.files.list(purpose="vision", order="asc", limit=2, after=after)
        mine += [f.id for f in page.data]
        if not page.has_more:
            break
        after = page.data[-1].id
    assert [i for i in mine if i in made] == made
    others = [f.purpose for f in client.files.list(purpose="evals")]
    assert set(others) <= {"evals"}


def test_another_accounts_file_answers_as_an_unknown_one(client: openai.OpenAI, other_client: openai.OpenAI) -> None:
    mine = client.files.create(file=("secret.txt", b"mine alone"), purpose="user_data")
    unknown = "file-" + "0" * 48
    for file_id in (mine.id, unknown):
        for call in (other_client.files.retrieve, other_client.files.content, other_client.files.delete):
            with pytest.raises(openai.NotFoundError) as refused:
                call(file_id)
            assert refused.value.body == {
                "message": f"No such File object: {file_id}",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
    assert mine.id not in [f.id for f in other_client.files.list()]
    assert client.files.content(mine.id).read() == b"mine alone"  # untouched


def _upload(server: InProcess, api_key: str, headers: dict[str, str] | None = None, **request: Any) -> Any:
    return server.http.post("/v1/files", headers={"authorization": f"Bearer {api_key}", **(headers or {})}, **request)


def _expiry(anchor: str, seconds: str) -> dict[str, str]:
    """`expires_after` as the SDK sends it in a form."""
    return {"expires_after[anchor]": anchor, "expires_after[seconds]": seconds}


@pytest.mark.parametrize(
    ("request_parts", "status", "param", "code"),
    [
        ({"files": {"file": ("a.txt", b"x")}, "data": {"purpose": "wrong"}}, 400, "purpose", "invalid_value"),
        ({"files": {"file": ("a.txt", b"x")}}, 400, "purpose", "missing_required_parameter"),
        ({"files": {"purpose": (None, "user_data")}}, 400, "file", "missing_required_parameter"),
        ({"files": {"file": ("a.txt", b"")}, "data": {"purpose": "user_data"}}, 400, "file", "empty_file"),
        (
            {
                "files": {"file": ("a.txt", b"x")},
                "data": {"purpose": "user_data", **_expiry("last_active_at", "3600")},
            },
            400,
            "expires_after.anchor",
            "invalid_value",
        ),
        (
            {
                "files": {"file": ("a.txt", b"x")},
                "data": {"purpose": "user_data", **_expiry("created_at", "59")},
            },
            400,
            "expires_after.seconds",
            "invalid_value",
        ),
        ({"json": {"purpose": "user_data"}}, 415, None, None),
    ],
)
def test_a_bad_upload_is_refused_naming_its_parameter_and_keeps_nothing(
    server: InProcess,
    api_key: str,
    environment: Environment,
    request_parts: dict[str, Any],
    status: int,
    param: str | None,
    code: str | None,
) -> None:
    before = _files_of(environment, api_key)
    answer = _upload(server, api_key, **request_parts)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code) and error["message"]
    assert _files_of(environment, api_key) == before


def test_a_body_cut_before_its_closing_boundary_keeps_nothing(
    server: InProcess, api_key: str, environment: Environment
) -> None:
    before = _files_of(environment, api_key)
    body = (
        b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n' + b"x" * 5000
    )
    answer = _upload(server, api_key, content=body, headers={"content-type": "multipart/form-data; boundary=b"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_multipart"
    assert _files_of(environment, api_key) == before


def test_list_parameters_are_checked(client: openai.OpenAI) -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"after": "file-nothing"}, "after"),
        ({"limit": 0}, "limit"),
        ({"purpose": "nonsense"}, "purpose"),
        ({"order": "sideways"}, "order"),
    ]
    for query, param in bad:
        with pytest.raises(openai.BadRequestError) as refused:
            client.files.list(**query)
        assert refused.value.body["param"] == param


@pytest.fixture
def limited(environment: Environment) -> Iterator[TestClient]:
    """The application with small limits: 2 MB a file, 3 MB an account."""
    settings = environment.settings().model_copy(
        update={"file_max_bytes": 2_000_000, "account_files_max_bytes": 3_000_000}
    )
    with TestClient(create_app(settings), base_url="http://testserver") as http:
        yield http


def test_an_upload_past_the_file_or_account_limit_is_refused_and_keeps_nothing(
    limited: TestClient, environment: Environment, keys_made: dict[tuple[str, str], str]
) -> None:
    key = key_of(keys_made, environment, f"limited-{secrets.token_hex(3)}")

    def upload(size: int) -> Any:
        return limited.post(
            "/v1/files",
            headers={"authorization": f"Bearer {key}"},
            files={"file": ("big.bin", secrets.token_bytes(size))},
            data={"purpose": "assistants"},
        )

    too_big = upload(2_000_001)
    assert too_big.status_code == 413 and too_big.json()["error"]["param"] == "file"
    assert "limit for one file" in too_big.json()["error"]["message"]
    assert _files_of(environment, key) == 0
    assert upload(1_900_000).status_code == 200
    over_account = upload(1_200_000)
    assert over_account.status_code == 413 and "account" in over_account.json()["error"]["message"]
    assert upload(1_000_000).status_code == 200  # what is left fits
    assert _files_of(environment, key) == 2 + 2 + 1  # two files: two pieces, then one


def test_an_expired_file_is_gone_at_once_and_removed_by_retention(
    client: openai.OpenAI, environment: Environment
) -> None:
    made = client.files.create(
        file=("brief.txt", b"x" * 10), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    environment.query("UPDATE files SET expires_at = now() - interval '1 second' WHERE id = $1", made.id)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)
    assert made.id not in [f.id for f in client.files.list()]

    async def sweep() -> None:
        engine = create_engine(environment.settings(), pool_size=1, max_overflow=0)
        try:
            policy = retention.RetentionPolicy.from_settings(environment.settings())
            step = next(s for s in retention.STEPS if s.name == "files")
            await retention.run_step(engine, policy, step)
        finally:
            await engine.dispose()

    asyncio.run(sweep())
    assert environment.query("SELECT count(*) AS n FROM file_pieces WHERE file_id = $1", made.id)[0]["n"] == 0
    assert environment.query("SELECT count(*) AS n FROM files WHERE id = $1", made.id)[0]["n"] == 0

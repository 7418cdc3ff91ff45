"""Bearer keys and account walls (design invariant 5)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import openai
import pytest

from tests.conftest import ROOT, Environment, FakeRuntime, Server, create_key


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer sk-rs-not-a-real-key-at-all"},
    ],
)
def test_missing_or_wrong_key_is_401(headers: dict[str, str], server: Server) -> None:
    for method, path in [
        ("POST", "/responses"),
        ("GET", "/responses/resp_x"),
        ("DELETE", "/responses/resp_x"),
        ("GET", "/responses/resp_x/input_items"),
        ("POST", "/responses/resp_x/cancel"),
    ]:
        answer = httpx.request(method, server.base_url + path, headers=headers, json={})
        assert answer.status_code == 401, (method, path)
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert "sk-rs-not-a-real-key-at-all" not in error["message"]  # never echo a whole key


def test_sdk_raises_authentication_error(server: Server) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-rs-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.responses.create(model="fake", input="x")
    assert caught.value.code == "invalid_api_key"


def test_revoked_key_is_refused(server: Server, environment: Environment, fake: FakeRuntime) -> None:
    key = create_key(environment, "revocable")
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    client.responses.create(model="fake", input="works")
    listed = subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "list"],
        cwd=ROOT,
        env=environment.env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert key[:12] in listed and key not in listed
    subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "revoke", key[:12]],
        cwd=ROOT,
        env=environment.env(),
        check=True,
        capture_output=True,
    )
    with pytest.raises(openai.AuthenticationError):
        client.responses.create(model="fake", input="refused")


def test_keys_are_stored_only_as_hashes(environment: Environment) -> None:
    key = create_key(environment, "hashed")
    rows = environment.query("SELECT key_hash, display_prefix FROM api_keys")
    assert all(key not in (r["key_hash"], r["display_prefix"]) for r in rows)
    import hashlib

    assert hashlib.sha256(key.encode()).hexdigest() in {r["key_hash"] for r in rows}


def test_another_account_sees_404_everywhere(
    client: openai.OpenAI, other_client: openai.OpenAI, fake: FakeRuntime, server: Server, other_api_key: str
) -> None:
    mine = client.responses.create(model="fake", input="private")
    unknown = "resp_" + "f" * 48
    for response_id in (mine.id, unknown):
        with pytest.raises(openai.NotFoundError) as caught:
            other_client.responses.retrieve(response_id)
        assert caught.value.body == {
            "message": f"Response with id '{response_id}' not found.",  # same words
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
        with pytest.raises(openai.NotFoundError):
            other_client.responses.input_items.list(response_id)
        with pytest.raises(openai.NotFoundError):
            other_client.responses.delete(response_id)
        with pytest.raises(openai.NotFoundError):
            other_client.responses.cancel(response_id)
        with pytest.raises(openai.BadRequestError) as chained:
            other_client.responses.create(model="fake", input="x", previous_response_id=response_id)
        assert chained.value.code == "previous_response_not_found"
    assert client.responses.retrieve(mine.id).output_text == "Echo: private"  # untouched by the attempts


def test_a_second_key_of_the_same_account_sees_its_responses(
    client: openai.OpenAI, fake: FakeRuntime, server: Server, environment: Environment, account_name: str
) -> None:
    response = client.responses.create(model="fake", input="shared")
    second = openai.OpenAI(base_url=server.base_url, api_key=create_key(environment, account_name), max_retries=0)
    assert second.responses.retrieve(response.id).output_text == "Echo: shared"
    follow_up = second.responses.create(model="fake", input="more", previous_response_id=response.id)
    assert follow_up.status == "completed"

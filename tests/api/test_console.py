"""The operator's console over HTTP (app/console/): who gets in (an operator key, never an
account's), what every page goes out with (its security headers, no inline script), what an action
must carry (the session's CSRF token), the responses list's filters and pages, one response's page
(its timeline, its chain, model text shown as text), its live events, and its cancel. The same
pages in a real browser: tests/e2e/test_console_browser.py."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import quote

import openai
import pytest
from starlette.testclient import TestClient

from tests.api.conftest import InProcess, serving_in_process
from tests.conftest import ROOT, Environment, create_key, key_of

SLOW = "#fake " + json.dumps({"text": " ".join(f"w{i}" for i in range(200)), "delay": 0.05})
XSS = '<script>alert("x")</script> [click](javascript:alert(1)) <img src=x onerror=alert(1)>'


def cli(environment: Environment, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=environment.env(), capture_output=True, text=True
    )


def operators(environment: Environment, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(environment, "operators", *args)


@pytest.fixture(scope="module")
def console(environment: Environment) -> Iterator[InProcess]:
    with serving_in_process(environment, console=True) as served:
        yield served


@pytest.fixture(scope="module")
def operator_key(environment: Environment) -> str:
    made = operators(environment, "create", f"op-{secrets.token_hex(3)}")
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


@pytest.fixture
def http(console: InProcess) -> TestClient:
    console.http.cookies.clear()
    return console.http


def log_in(http: TestClient, key: str) -> dict[str, str]:
    """A session's cookie, as the headers of the requests that carry it."""
    answer = http.post("/console/login", data={"key": key, "next": "/console/responses"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    cookie = answer.cookies["rs_console"]
    http.cookies.clear()
    return {"cookie": f"rs_console={cookie}"}


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found[1]


@pytest.fixture
def session(http: TestClient, operator_key: str) -> dict[str, str]:
    return log_in(http, operator_key)


@pytest.fixture
def console_client(console: InProcess, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=console.base_url, api_key=api_key, max_retries=0, timeout=30, http_client=console.http
    )


def test_the_console_is_off_unless_enabled(client: openai.OpenAI, server: InProcess) -> None:
    assert server.http.get("/console/responses", follow_redirects=False).status_code == 404


def test_only_a_live_operator_key_opens_a_session(
    http: TestClient, operator_key: str, api_key: str, environment: Environment
) -> None:
    for wrong in ("", "rs-op-not-a-key", api_key):  # an account's API key opens nothing here
        answer = http.post("/console/login", data={"key": wrong}, follow_redirects=False)
        assert answer.status_code in (400, 401) and "rs_console" not in answer.cookies
    answer = http.post("/console/login", data={"key": operator_key}, follow_redirects=False)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    # Nor does an operator's key open the API.
    assert http.get("/v1/responses/resp_x", headers={"authorization": f"Bearer {operator_key}"}).status_code == 401


def test_without_a_session_every_page_sends_to_the_login_form_and_back(http: TestClient) -> None:
    answer = http.get("/console/responses?status=failed", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login?next=%2Fconsole%2Fresponses%3Fstatus%3Dfailed"
    assert http.get("/console/responses/resp_x/events", follow_redirects=False).status_code == 303


def test_logging_in_never_sends_the_operator_to_another_site(http: TestClient, operator_key: str) -> None:
    for elsewhere in ("https://evil.example/", "//evil.example/console/", "/console\\@evil.example"):
        answer = http.post("/console/login", data={"key": operator_key, "next": elsewhere}, follow_redirects=False)
        assert answer.headers["location"] == "/console/responses"


def test_every_page_forbids_inline_script_framing_and_other_origins(http: TestClient, session: dict[str, str]) -> None:
    for path in ("/console/login", "/console/responses"):
        answer = http.get(path, headers=session)
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"
        assert re.search(r"<script(?![^>]*\bsrc=)", answer.text) is None  # every script is a file


def test_model_text_is_shown_as_text(http: TestClient, session: dict[str, str], console_client: openai.OpenAI) -> None:
    response = console_client.responses.create(
        model="fake", input="#fake " + json.dumps({"text": XSS}), metadata={"note": "<b>bold</b>"}
    )
    page = http.get(f"/console/responses/{response.id}", headers=session).text
    assert '<script>alert("x")</script>' not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert 'href="javascript:' not in page
    listed = http.get(f"/console/responses?id={response.id}", headers=session).text
    assert "<b>bold</b>" not in listed and "note=&lt;b&gt;bold&lt;/b&gt;" in listed


def test_the_list_filters_and_pages_newest_first_over_every_account(
    http: TestClient,
    session: dict[str, str],
    console: InProcess,
    environment: Environment,
    keys_made: dict[tuple[str, str], str],
) -> None:
    run = secrets.token_hex(3)
    made = []
    for n, account in enumerate([f"console-a-{run}", f"console-b-{run}"] * 30):
        client = openai.OpenAI(
            base_url=console.base_url, api_key=key_of(keys_made, environment, account), http_client=console.http
        )
        response = client.responses.create(model="fake", input=f"hello {n}", metadata={"run": run, "n": str(n)})
        made.append((response.id, account))
    newest_first = [response_id for response_id, _ in reversed(made)]

    def listed(query: str) -> list[str]:
        page = http.get(f"/console/responses?{query}", headers=session).text
        return re.findall(r'href="/console/responses/(resp_[0-9a-f]+)"', page)

    first = http.get(f"/console/responses?metadata=run%3D{run}", headers=session).text
    first_ids = re.findall(r'href="/console/responses/(resp_[0-9a-f]+)"', first)
    older = re.search(r'class="next" href="/console/responses\?([^"]+)"', first)
    assert older is not None
    second_ids = listed(older[1].replace("&amp;", "&"))
    assert first_ids + second_ids == newest_first  # 50, then the 10 older, none twice, none missed
    assert listed(f"metadata=run%3D{run}&account=console-b-{run}") == [
        i for i, a in reversed(made) if a.endswith(f"b-{run}")
    ]
    assert listed(f"metadata=n%3D7&account=console-b-{run}") == [made[7][0]]
    assert listed(f"id={made[3][0][:20]}") == [made[3][0]]
    assert listed(f"metadata=run%3D{run}&status=failed") == []
    future = quote(datetime.now(UTC).replace(year=2100).isoformat())
    assert listed(f"metadata=run%3D{run}&from={future}") == []
    assert listed(f"metadata=run%3D{run}&to={future}")[:3] == newest_first[:3]
    assert listed(f"metadata=run%3D{run}&status=not-a-status&from=yesterday")[:3] == newest_first[:3]  # (ignored)


def test_a_response_page_shows_its_chain_items_usage_and_timeline(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    first = console_client.responses.create(model="fake", input="first question")
    second = console_client.responses.create(model="fake", input="second question", previous_response_id=first.id)
    page = http.get(f"/console/responses/{first.id}", headers=session).text
    assert "first question" in page and f'href="/console/responses/{second.id}"' in page
    second_page = http.get(f"/console/responses/{second.id}", headers=session).text
    assert f'href="/console/responses/{first.id}"' in second_page
    for step in ("waiting for a worker", "to first output", "claimed", "ended"):
        assert step in second_page
    assert f"{second.usage.input_tokens} in" in second_page
    assert http.get("/console/responses/resp_unknown", headers=session).status_code == 404


def test_an_action_without_the_sessions_csrf_token_is_refused(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    running = console_client.responses.create(model="fake", input=SLOW, background=True)
    path = f"/console/responses/{running.id}/cancel"
    token = csrf_of(http.get(f"/console/responses/{running.id}", headers=session).text)
    refused = [
        http.post(path, headers=session, data={}),
        http.post(path, headers=session, data={"csrf_token": "forged"}),
        http.post(path, headers={**session, "origin": "https://evil.example"}, data={"csrf_token": token}),
        http.post("/console/logout", headers=session, data={}),
    ]
    assert [answer.status_code for answer in refused] == [403] * 4
    assert console_client.responses.retrieve(running.id).status in ("queued", "in_progress")
    console_client.responses.cancel(running.id)


def test_an_operator_cancels_a_running_response_of_any_account(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    running = console_client.responses.create(model="fake", input=SLOW, background=True)
    page = http.get(f"/console/responses/{running.id}", headers=session).text
    assert "Cancel this response" in page and 'id="live"' in page
    answer = http.post(
        f"/console/responses/{running.id}/cancel",
        headers=session,
        data={"csrf_token": csrf_of(page)},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    assert console_client.responses.retrieve(running.id).status == "cancelled"
    assert "Cancel this response" not in http.get(f"/console/responses/{running.id}", headers=session).text


def test_a_running_response_is_followed_to_its_end(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    text = " ".join(f"t{i}" for i in range(20))
    running = console_client.responses.create(
        model="fake", input="#fake " + json.dumps({"text": text, "delay": 0.05}), background=True
    )
    with http.stream("GET", f"/console/responses/{running.id}/events?starting_after=-1", headers=session) as stream:
        assert stream.status_code == 200
        events = [json.loads(line[5:]) for line in stream.iter_lines() if line.startswith("data:")]
    assert events[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text


def test_a_revoked_operator_key_ends_its_sessions(http: TestClient, environment: Environment) -> None:
    name = f"leaving-{secrets.token_hex(3)}"
    key = operators(environment, "create", name).stdout.strip().splitlines()[-1]
    session = log_in(http, key)
    assert http.get("/console/responses", headers=session, follow_redirects=False).status_code == 200
    assert operators(environment, "create", name).returncode == 1  # (one live key per name)
    assert operators(environment, "revoke", name).returncode == 0
    assert http.get("/console/responses", headers=session, follow_redirects=False).status_code == 303
    assert http.post("/console/login", data={"key": key}, follow_redirects=False).status_code == 401


def test_logging_out_ends_the_session(http: TestClient, operator_key: str) -> None:
    session = log_in(http, operator_key)
    token = csrf_of(http.get("/console/responses", headers=session).text)
    assert (
        http.post("/console/logout", headers=session, data={"csrf_token": token}, follow_redirects=False).status_code
        == 303
    )
    assert http.get("/console/responses", headers=session, follow_redirects=False).status_code == 303


def test_an_account_page_shows_its_keys_usage_refusals_and_responses(
    http: TestClient, session: dict[str, str], console: InProcess, environment: Environment
) -> None:
    name = f"watched-{secrets.token_hex(3)}"
    key = create_key(environment, name)
    client = openai.OpenAI(base_url=console.base_url, api_key=key, max_retries=0, http_client=console.http)
    done = [client.responses.create(model="fake", input=f"count me {n}") for n in range(2)]
    assert cli(environment, "limits", "set", name, "--requests-per-minute", "1").returncode == 0
    done.append(client.responses.create(model="fake", input="the minute's one"))
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="fake", input="one too many")
    listed = http.get("/console/accounts", headers=session).text
    account_id = re.search(rf'href="/console/accounts/(acct_[0-9a-f]+)">{name}</a>', listed)
    assert account_id is not None
    page = http.get(f"/console/accounts/{account_id[1]}", headers=session).text
    today = datetime.now(UTC).date().isoformat()
    tokens_in = sum(r.usage.input_tokens for r in done if r.usage is not None)
    tokens_out = sum(r.usage.output_tokens for r in done if r.usage is not None)
    assert f"<td>{today}</td><td>3</td><td>{tokens_in}</td><td>0</td><td>{tokens_out}</td>" in page
    assert f"{today}: 1" in page  # the one refused create
    assert [r.id for r in done if f'href="/console/responses/{r.id}"' in page] == [r.id for r in done]
    assert key[:12] in page and page.count('class="revoke"') == 1


def test_an_operator_revokes_an_accounts_key_and_no_other(
    http: TestClient, session: dict[str, str], console: InProcess, environment: Environment
) -> None:
    name, other = f"revoked-{secrets.token_hex(3)}", f"kept-{secrets.token_hex(3)}"
    key = create_key(environment, name)
    kept = create_key(environment, other)
    listed = http.get("/console/accounts", headers=session).text
    account_id = re.search(rf'href="/console/accounts/(acct_[0-9a-f]+)">{name}</a>', listed)
    kept_id = re.search(rf'href="/console/accounts/(acct_[0-9a-f]+)">{other}</a>', listed)
    assert account_id is not None and kept_id is not None
    page = http.get(f"/console/accounts/{account_id[1]}", headers=session).text
    revoke = re.search(r'action="(/console/accounts/[^"]+/keys/(key_[0-9a-f]+)/revoke)"', page)
    assert revoke is not None
    other_page = http.get(f"/console/accounts/{kept_id[1]}", headers=session).text
    other_key = re.search(r'/keys/(key_[0-9a-f]+)/revoke"', other_page)
    assert other_key is not None
    # Another account's key through this account's form, or no token: refused, nothing revoked.
    crossed = f"/console/accounts/{account_id[1]}/keys/{other_key[1]}/revoke"
    assert http.post(crossed, headers=session, data={"csrf_token": csrf_of(page)}).status_code == 403
    assert http.post(revoke[1], headers=session, data={}).status_code == 403
    answer = http.post(revoke[1], headers=session, data={"csrf_token": csrf_of(page)}, follow_redirects=False)
    assert answer.status_code == 303
    for api_key, works in ((key, False), (kept, True)):
        client = openai.OpenAI(base_url=console.base_url, api_key=api_key, max_retries=0, http_client=console.http)
        if works:
            client.responses.create(model="fake", input="still here")
        else:
            with pytest.raises(openai.AuthenticationError):
                client.responses.create(model="fake", input="gone")
    assert "revoked" in http.get(f"/console/accounts/{account_id[1]}", headers=session).text


def test_the_system_page_shows_queues_workers_and_the_last_hour(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    running = console_client.responses.create(model="fake", input=SLOW, background=True)
    try:
        deadline = time.monotonic() + 10
        while console_client.responses.retrieve(running.id).status != "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
        page = http.get("/console/system", headers=session).text
        assert "fake-model" in page  # its queue: the running response
        assert "taking jobs" in page  # a worker alive, and what it runs
        assert f'href="/console/responses/{running.id}"' in page
        assert "Time to first output, p99" in page and "<rect" in page
    finally:
        console_client.responses.cancel(running.id)


def test_a_conversation_page_shows_its_items_and_responses(
    http: TestClient, session: dict[str, str], console_client: openai.OpenAI
) -> None:
    conversation = console_client.conversations.create(items=[{"role": "user", "content": "<i>opening</i> words"}])
    made = console_client.responses.create(model="fake", input="in the conversation", conversation=conversation.id)
    page = http.get(f"/console/conversations/{conversation.id}", headers=session).text
    assert "&lt;i&gt;opening&lt;/i&gt; words" in page and "in the conversation" in page
    assert f'href="/console/responses/{made.id}"' in page
    response_page = http.get(f"/console/responses/{made.id}", headers=session).text
    assert f'href="/console/conversations/{conversation.id}"' in response_page
    assert http.get("/console/conversations/conv_unknown", headers=session).status_code == 404


def test_hostile_queries_and_paths_get_an_answer_never_an_error(http: TestClient, session: dict[str, str]) -> None:
    for path in (
        "/console/responses?account=%00&model=a%00b&id=resp_%00&metadata=k%00%3Dv&before=x%00%7Cy",
        "/console/responses?id=%F4%8F%BF%BF",  # the last code point: no upper bound to its range
        "/console/responses?id=" + "r" * 5000,
    ):
        answer = http.get(path, headers=session)
        assert answer.status_code == 200 and "No response matches." in answer.text, path
    # Values that do not parse are ignored, as empty fields: the whole list.
    assert http.get("/console/responses?before=not-a-time%7Cresp_x&from=%00&to=2026-13-45", headers=session).is_success
    for path in ("/console/responses/resp_%00", "/console/conversations/conv%00", "/console/accounts/acct_%00"):
        assert http.get(path, headers=session).status_code == 404, path
    assert http.get("/console/responses/resp_x/events?starting_after=%00", headers=session).status_code == 404

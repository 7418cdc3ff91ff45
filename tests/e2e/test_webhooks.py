"""Webhooks through real processes: endpoints managed with the command line, a background
response's event delivered to a receiver and verified with the OpenAI SDK's `webhooks.unwrap`,
and a delivery that outlives every process of the service while its receiver is down."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time

import openai
import pytest

from tests.conftest import (
    ROOT,
    Environment,
    Server,
    create_key,
    free_port,
    new_environment,
    start_api,
    start_worker,
    stop,
)
from tests.webhook_receiver import Receiver


def cli(environment: Environment, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "webhooks", *args],
        cwd=ROOT,
        env=environment.env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def finished(client: openai.OpenAI, response_id: str) -> str:
    for _ in range(300):
        status = client.responses.retrieve(response_id).status
        if status not in ("queued", "in_progress"):
            return str(status)
        time.sleep(0.05)
    raise TimeoutError(response_id)


def test_an_endpoint_added_on_the_command_line_gets_the_event_the_sdk_verifies(
    environment: Environment, server: Server
) -> None:
    account = f"hooks-{secrets.token_hex(3)}"
    client = openai.OpenAI(base_url=server.base_url, api_key=create_key(environment, account), max_retries=0)
    receiver = Receiver().start()
    try:
        added = cli(environment, "add", account, receiver.url, "--events", "response.completed")
        assert added.returncode == 0, added.stderr
        secret = added.stdout.strip().splitlines()[-1]
        assert secret.startswith("whsec_")
        [listed] = cli(environment, "list", account).stdout.strip().splitlines()
        endpoint = listed.split()[0]
        assert endpoint.startswith("we_") and receiver.url in listed
        response = client.responses.create(model="fake", input="hello", background=True)
        assert finished(client, response.id) == "completed"
        [received] = receiver.wait_for(1)
        event = client.webhooks.unwrap(received.body, received.headers, secret=secret)
        assert (event.type, event.data.id) == ("response.completed", response.id)
        rotated = cli(environment, "rotate", endpoint)
        assert rotated.returncode == 0 and rotated.stdout.strip().splitlines()[-1] not in (secret, "")
        assert cli(environment, "remove", endpoint).returncode == 0
        assert cli(environment, "remove", endpoint).returncode == 1
    finally:
        receiver.stop()


def test_an_endpoint_is_refused_where_the_egress_guard_would_refuse_it(environment: Environment) -> None:
    account = f"hooks-{secrets.token_hex(3)}"
    create_key(environment, account)
    refused = cli(environment, "add", account, "http://10.1.2.3/hook")
    assert refused.returncode == 1 and "10.1.2.3" in refused.stderr and "RESPONSES_WEBHOOK_ALLOW" in refused.stderr
    allowed = cli(environment, "add", account, "http://10.1.2.3/hook", RESPONSES_WEBHOOK_ALLOW="10.0.0.0/8")
    assert allowed.returncode == 0, allowed.stderr  # (checked, never connected to)
    assert cli(environment, "add", "no-such-account", "http://127.0.0.1:9/hook").returncode == 1
    bad_event = cli(environment, "add", account, "http://127.0.0.1:9/hook", "--events", "response.done")
    assert bad_event.returncode == 1 and "response.completed" in bad_event.stderr
    assert cli(environment, "add", account, "ftp://127.0.0.1/hook").returncode == 1


def test_a_delivery_outlives_every_process_while_its_receiver_is_down(
    tmp_path_factory: pytest.TempPathFactory, fake_runtime_url: str
) -> None:
    with new_environment(tmp_path_factory, fake_runtime_url) as environment:
        account = f"hooks-{secrets.token_hex(3)}"
        key = create_key(environment, account)
        receiver = Receiver()  # not started: nothing listens on its port yet
        assert cli(environment, "add", account, receiver.url).returncode == 0
        port = free_port()
        api, worker = start_api(environment, port), start_worker(environment)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        response = client.responses.create(model="fake", input="hello", background=True)
        assert finished(client, response.id) == "completed"
        for _ in range(100):  # an attempt failed: the receiver is down
            [row] = environment.query("SELECT attempts, last_error FROM webhook_deliveries")
            if row["last_error"]:
                break
            time.sleep(0.05)
        assert row["last_error"]
        stop(api, worker)
        receiver.start()
        try:
            api, worker = start_api(environment, port), start_worker(environment)
            [received] = receiver.wait_for(1)
            assert json.loads(received.body)["data"]["id"] == response.id
            time.sleep(1)
            assert len(receiver.received) == 1  # once
        finally:
            stop(api, worker)
            receiver.stop()

"""The operator's command line against a running system: accounts (a disabled one's keys are
refused at once, and let in again), status (the queue per model and the workers alive), gc."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys

import openai
import pytest

from tests.conftest import ROOT, Environment, FakeRuntime, Server, wait_until


def cli(environment: Environment, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=environment.env(), capture_output=True, text=True
    )


def test_a_disabled_accounts_keys_are_refused_until_it_is_enabled(
    environment: Environment, server: Server, fake: FakeRuntime
) -> None:
    name = f"ops-{secrets.token_hex(3)}"
    assert cli(environment, "accounts", "create", name).returncode == 0
    key = cli(environment, "keys", "create", "--account", name).stdout.strip().splitlines()[-1]
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)
    kept = client.responses.create(model="fake", input="before")
    assert cli(environment, "accounts", "disable", name).stdout.strip() == f"disabled {name}"
    with pytest.raises(openai.AuthenticationError):
        client.responses.retrieve(kept.id)
    listed = cli(environment, "accounts", "list").stdout
    assert re.search(rf"^{name}  acct_\w+  created=\S+ \S+  live_keys=1  disabled ", listed, re.MULTILINE)
    assert cli(environment, "accounts", "enable", name).returncode == 0
    assert client.responses.retrieve(kept.id).output_text == "Echo: before"  # its responses were kept
    missing = cli(environment, "accounts", "disable", "nobody-by-that-name")
    assert missing.returncode == 1 and "no account named" in missing.stderr


def test_status_shows_the_queue_per_model_and_the_workers_alive(
    environment: Environment, server: Server, client: openai.OpenAI, fake: FakeRuntime
) -> None:
    waiting = client.responses.create(model="hosted-vllm", input="nobody hosts it", background=True)
    try:
        status = ""

        def shows_a_worker() -> bool:
            nonlocal status
            status = cli(environment, "status").stdout
            return "running 0 of 256" in status or "running 1 of 256" in status

        wait_until(shows_a_worker, timeout=15)  # its heartbeat comes with its housekeeping
        assert re.search(r"^  hosted-vllm: [1-9]\d* queued \(oldest \d+s\)", status, re.MULTILINE), status
        assert re.search(r"^  \S+:\d+: .*fake-model.*; running \d+ of 256$", status, re.MULTILINE), status
    finally:
        client.responses.cancel(waiting.id)


def test_gc_applies_retention_now_and_says_what_it_removed(environment: Environment, server: Server) -> None:
    collected = cli(environment, "gc")
    assert collected.returncode == 0, collected.stderr
    assert re.match(r"removed \{'stored': \d+, 'unstored_background': \d+", collected.stdout)

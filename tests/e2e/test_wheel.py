"""The package as a user installs it: a wheel built from this tree, installed (not editable) into
a fresh virtualenv outside it, runs `responses-server migrate`, `api` and `worker` and serves a
response, and its console's pages. The new environment borrows this one's installed dependencies through a path file (no
network needed), never its editable install: the project itself comes only from the wheel."""

from __future__ import annotations

import secrets
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import openai

from tests.conftest import ROOT, Environment, FakeRuntime, admin_sql, free_port, stop, wait_for_http


def test_a_wheel_installed_outside_the_tree_migrates_and_serves(
    tmp_path: Path, environment: Environment, fake: FakeRuntime
) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path, ROOT], check=True)
    [wheel] = tmp_path.glob("responses_server-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python, command = venv / "bin" / "python", venv / "bin" / "responses-server"
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel], check=True)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = subprocess.run(
        [python, "-c", "import app, workers, migrations; print(app.__file__, workers.__file__, migrations.__file__)"],
        cwd=outside,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(site)) for path in where), where

    database = f"rs_wheel_{secrets.token_hex(4)}"
    admin_sql(f'CREATE DATABASE "{database}"')
    env = {
        **environment.env(),
        "DATABASE_URL": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}",
        "RESPONSES_QUEUE": f"responses:wheel:{secrets.token_hex(4)}",
    }
    env.pop("PYTHONPATH", None)
    processes = []
    try:
        subprocess.run([command, "migrate"], cwd=outside, env=env, check=True, capture_output=True)
        keys = subprocess.run(
            [command, "keys", "create", "--account", "wheel"], cwd=outside, env=env, check=True, capture_output=True
        )
        key = keys.stdout.decode().strip().splitlines()[-1]
        port = free_port()
        console_env = {**env, "RESPONSES_CONSOLE": "true"}
        processes.append(subprocess.Popen([command, "api", "--port", str(port)], cwd=outside, env=console_env))
        processes.append(subprocess.Popen([command, "worker"], cwd=outside, env=env))
        wait_for_http(f"http://127.0.0.1:{port}/ready", processes[0])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=30)
        answer = client.responses.create(model="fake", input="from the wheel")
        assert answer.status == "completed" and answer.output_text == "Echo: from the wheel"
        # The console's templates, stylesheet and script ship in the wheel.
        console = f"http://127.0.0.1:{port}/console"
        assert "Operator key" in httpx.get(f"{console}/login").text
        for asset in ("console.css", "live.js"):
            assert httpx.get(f"{console}/static/{asset}").status_code == 200
    finally:
        stop(*processes)
        admin_sql(f'DROP DATABASE "{database}" WITH (FORCE)')

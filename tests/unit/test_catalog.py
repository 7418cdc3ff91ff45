"""The catalog file: which runtime serves each model, and which queue its jobs go to."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.catalog import Catalog, CatalogError, LlamaCppModel, OpenAIModel, VllmModel

CATALOG = """
[[models]]
id = "external"
aliases = ["default"]
runtime = "openai"
base_url = "http://gpu-box:8000/v1"
upstream_model = "Qwen/Qwen3-8B"

[[models]]
id = "qwen3-gpu"
runtime = "vllm"
model = "Qwen/Qwen3-8B"
tensor_parallel_size = 2
tool_call_parser = "hermes"
reasoning_parser = "qwen3"
context_window = 32768

[[models]]
id = "local"
runtime = "llamacpp"

[[embedding_models]]
id = "bge"
runtime = "vllm"
model = "BAAI/bge-m3"
dimensions = 1024

[[embedding_models]]
id = "remote-embedder"
runtime = "openai"
base_url = "http://embedder:8000/v1"
dimensions = 1024
"""


def load(tmp_path: Path, text: str) -> Catalog:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return Catalog.load(path)


def test_each_runtime_gets_its_own_entry_type(tmp_path: Path) -> None:
    catalog = load(tmp_path, CATALOG)
    assert isinstance(catalog.by_name["default"], OpenAIModel)
    assert catalog.by_name["default"].served_name == "Qwen/Qwen3-8B"
    gpu = catalog.by_name["qwen3-gpu"]
    assert isinstance(gpu, VllmModel) and gpu.tensor_parallel_size == 2 and gpu.supervised
    assert gpu.served_name == "qwen3-gpu"  # the worker serves it under the catalog id
    local = catalog.by_name["local"]
    assert isinstance(local, LlamaCppModel) and local.model_path is None and local.base_url is None
    assert [e.id for e in catalog.entries] == ["external", "qwen3-gpu", "local"]


def test_hosted_models_have_queues_of_their_own(tmp_path: Path) -> None:
    catalog = load(tmp_path, CATALOG)
    assert catalog.queue_for("default", "q") == "q"
    assert catalog.queue_for("qwen3-gpu", "q") == "q:model:qwen3-gpu"
    assert catalog.queue_for("local", "q") == "q:model:local"
    assert catalog.queue_for("gone-from-catalog", "q") == "q"  # a plain worker fails it with a clear error


def test_an_embedding_models_work_goes_to_the_workers_that_embed_with_it(tmp_path: Path) -> None:
    catalog = load(tmp_path, CATALOG)
    assert catalog.embedding_queue_for("bge", "q") == "q:model:bge"  # its hosting worker's
    assert catalog.embedding_queue_for("remote-embedder", "q") == "q"
    assert catalog.embedding_queue_for("gone-from-catalog", "q") == "q"
    assert catalog.hosted("bge") is catalog.embeddings_by_name["bge"]
    assert catalog.hosted("remote-embedder") is None and catalog.hosted("default") is None


def test_a_worker_points_its_hosted_model_at_its_server(tmp_path: Path) -> None:
    catalog = load(tmp_path, CATALOG)
    local = catalog.by_name["local"]
    updated = catalog.replaced(local.model_copy(update={"base_url": "http://127.0.0.1:9/v1"}))
    assert updated.by_name["local"].base_url == "http://127.0.0.1:9/v1"
    assert catalog.by_name["local"].base_url is None
    assert updated.by_name["default"] is catalog.by_name["default"]
    assert updated.embedding_models == catalog.embedding_models  # a hosting worker's file searches need them
    bge = catalog.embeddings_by_name["bge"]
    pointed = catalog.replaced(bge.model_copy(update={"base_url": "http://127.0.0.1:9/v1"}))
    assert pointed.embedding_model("bge").base_url == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]
    assert pointed.by_name == catalog.by_name


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('[[models]]\nid = "a"\nruntime = "openai"\n', "base_url"),
        ('[[models]]\nid = "a"\nruntime = "vllm"\n', "model"),
        ('[[models]]\nid = "a"\nruntime = "llamacpp"\nbase_url = "http://x/v1"\n', "set by the worker"),
        ('[[models]]\nid = "a"\nruntime = "tgi"\nbase_url = "http://x/v1"\n', "runtime"),
        ('[[models]]\nid = "a"\nruntime = "vllm"\nmodel = "m"\ngpu_memory_utilization = 1.5\n', "gpu_memory"),
        ('[[models]]\nid = "a"\nruntime = "llamacpp"\nthreds = 2\n', "threds"),
        ('[[models]]\nid = "a"\nruntime = "vllm"\nmodel = "m"\ndevice = "cpu"\nkv_cache_gib = 1.5\n', "kv_cache_gib"),
        ('[[embedding_models]]\nid = "e"\nruntime = "vllm"\ndimensions = 8\n', "model"),
        ('[[embedding_models]]\nid = "e"\nruntime = "vllm"\nmodel = "m"\n', "dimensions"),
        (
            '[[embedding_models]]\nid = "e"\nruntime = "vllm"\nmodel = "m"\ndimensions = 8\nbase_url = "http://x"\n',
            "set by the worker",
        ),
        (
            '[[embedding_models]]\nid = "e"\nruntime = "vllm"\nmodel = "m"\ndimensions = 8\nkv_cache_gib = 2\n',
            "gpu_memory_utilization",
        ),
        (
            '[[models]]\nid = "a"\nruntime = "vllm"\nmodel = "m"\nmax_model_len = 4096\ncontext_window = 8192\n',
            "larger than max_model_len",
        ),
        (
            '[[models]]\nid = "a"\nruntime = "llamacpp"\n[[models]]\nid = "b"\naliases = ["a"]\nruntime = "llamacpp"\n',
            "twice",
        ),
    ],
)
def test_a_bad_catalog_is_refused_with_the_reason(tmp_path: Path, text: str, complaint: str) -> None:
    with pytest.raises(CatalogError, match=complaint):
        load(tmp_path, text)


def test_the_example_catalog_in_the_repository_is_valid() -> None:
    catalog = Catalog.load(Path(__file__).parents[2] / "models.example.toml")
    assert {entry.runtime for entry in catalog.entries} == {"openai", "vllm", "llamacpp"}


def test_a_vllm_models_context_window_defaults_to_its_max_model_len(tmp_path: Path) -> None:
    catalog = load(tmp_path, '[[models]]\nid = "a"\nruntime = "vllm"\nmodel = "m"\nmax_model_len = 4096\n')
    assert catalog.by_name["a"].context_window == 4096

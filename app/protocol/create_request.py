"""`POST /v1/responses`: the accepted body, its limits, and the settings a Response echoes."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from app import errors
from app.catalog import SamplingDefaults
from app.protocol.input_items import parse_input
from app.protocol.mcp_tools import MCP_NOT_RUN, Credentials, McpPolicy
from app.protocol.search_results import SEARCH_RESULTS, WEB_SEARCH_RESULTS, WEB_SEARCH_SOURCES
from app.protocol.shapes import Item, Tool
from app.protocol.text_format import parse_text_format
from app.protocol.tools import HostedToolsPolicy, ToolChoice, parse_tool_choice, parse_tools, served_kind
from app.protocol.validation import INT32_MAX, StrictModel, validate

ENCRYPTED_REASONING = "reasoning.encrypted_content"
LOGPROBS = "message.output_text.logprobs"
INCLUDABLE = {
    SEARCH_RESULTS,
    WEB_SEARCH_RESULTS,
    WEB_SEARCH_SOURCES,
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    ENCRYPTED_REASONING,
    LOGPROBS,
}

# OpenAI parameters this server recognises but does not serve: 400 unsupported_parameter, with
# why (a moderation policy silently not applied would be a safety setting quietly dropped).
UNSUPPORTED = {
    "prompt": "prompts are made in OpenAI's dashboard and kept there; send the instructions and input instead",
    "moderation": "no moderation model runs here, and a policy silently not applied would be worse than none",
}


class ContextManagement(StrictModel):
    # Compaction once the context passes `compact_threshold` tokens (workers/jobs/compacting.py).
    type: Literal["compaction"]
    compact_threshold: int | None = Field(None, ge=1, le=INT32_MAX)


class StreamOptions(StrictModel):
    include_obfuscation: bool | None = None


class TextOptions(StrictModel):
    format: dict[str, Any] | None = None  # checked by text_format.parse_text_format
    verbosity: Literal["low", "medium", "high"] | None = None


class AccessPrograms(StrictModel):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class BackgroundOptions(StrictModel):
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = Field(None, max_length=512)


class ImageOptions(StrictModel):
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class PromptCacheOptions(StrictModel):
    comparison_response_id: str | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: bool | None = None
    ttl: Literal["30m", "12h"] | None = None


class ReasoningOptions(StrictModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# OpenAI's limits on `metadata` values; `client_metadata` values get more room, since Codex
# sends its turn's metadata as one JSON string of about 900 characters.
METADATA_VALUE_CHARS = 512
CLIENT_METADATA_VALUE_CHARS = 4096


def string_map_limits(value: dict[str, str] | None, value_chars: int) -> dict[str, str] | None:
    """At most 16 pairs, keys of at most 64 characters, values of at most `value_chars`."""
    if value is None:
        return value
    if len(value) > 16:
        raise ValueError("at most 16 key-value pairs are allowed")
    for key, item in value.items():
        if len(key) > 64:
            raise ValueError(f"key '{key[:20]}…' is longer than 64 characters")
        if len(item) > value_chars:
            raise ValueError(f"the value of '{key}' is longer than {value_chars} characters")
    return value


class SamplingOptions(StrictModel):
    """Sampling parameters vLLM takes beyond OpenAI's (SDK users send them as `extra_body`),
    forwarded to the model server as they are."""

    top_k: int | None = Field(None, ge=-1, le=INT32_MAX)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    stop: str | list[str] | None = None
    min_tokens: int | None = Field(None, ge=0, le=INT32_MAX)
    logit_bias: dict[str, float] | None = None
    skip_special_tokens: bool | None = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not 1 <= len(value) <= 16:
            raise ValueError("expected 1 to 16 stop strings")
        if value is not None and any(not text for text in ([value] if isinstance(value, str) else value)):
            raise ValueError("a stop string may not be empty")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (value or {}).items():
            if not token.isascii() or not token.isdigit():
                raise ValueError(f"'{token[:20]}' is not a token id")
            if not -100 <= bias <= 100:
                raise ValueError(f"the bias of token {token} is outside -100..100")
        return value


class CreateResponseRequest(SamplingOptions):
    model: str = Field(min_length=1)
    input: str | list[Any]
    instructions: str | None = None
    previous_response_id: str | None = Field(None, min_length=1)
    conversation: str | None = None  # an id, or {"id": …}: see _conversation_id
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    include: list[str] | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    tools: list[Any] | None = None  # checked by tools.parse_tools
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=16, le=INT32_MAX)
    max_tool_calls: int | None = Field(None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    truncation: Literal["auto", "disabled"] | None = None
    context_management: list[ContextManagement] | None = Field(None, max_length=1)
    metadata: dict[str, str] | None = None
    # Codex's own bookkeeping (thread and turn ids): accepted, kept from the model, not echoed.
    client_metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = Field(None, max_length=64)
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None = None
    access_programs: AccessPrograms | None = None
    background_options: BackgroundOptions | None = None
    image: ImageOptions | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # what responses.parse(verbosity=…) sends

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, METADATA_VALUE_CHARS)

    @field_validator("conversation", mode="before")
    @classmethod
    def _conversation_id(cls, value: Any) -> Any:
        """A conversation is named by its id, or by an object holding only its id."""
        if isinstance(value, dict):
            if set(value) != {"id"}:
                raise ValueError("expected a conversation id, or an object with only its id")
            value = value["id"]
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError("expected a conversation id")
        return value

    @field_validator("client_metadata")
    @classmethod
    def _client_metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, CLIENT_METADATA_VALUE_CHARS)

    def sampling(self) -> dict[str, Any]:
        """The vLLM sampling parameters the client set."""
        return {name: getattr(self, name) for name in SamplingOptions.model_fields if getattr(self, name) is not None}


class ValidatedCreate(BaseModel):
    """A create request that passed every check: what the service persists and the worker runs."""

    request: CreateResponseRequest
    input_items: list[Item]
    text_format: dict[str, Any]
    tools: list[Tool]
    tool_choice: ToolChoice
    # The server runs the MCP tools among `tools` (RESPONSES_MCP=run), with these credentials
    # by server label: never echoed, stored or logged (design invariant 5).
    runs_mcp: bool = False
    # The server runs the file_search tool among `tools` (it has pgvector and an embedding model).
    runs_file_search: bool = False
    # The server runs the web_search tool among `tools` (a search backend is configured).
    runs_web_search: bool = False
    mcp_credentials: dict[str, Credentials] = Field(default_factory=dict, repr=False, exclude=True)

    @property
    def store(self) -> bool:
        return self.request.store is not False

    @property
    def conversation_id(self) -> str | None:
        """The conversation the response is created in (`conversation`, as an id or `{"id"}`)."""
        return self.request.conversation

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)

    @property
    def background(self) -> bool:
        return bool(self.request.background)

    @property
    def logprobs(self) -> bool:
        """Whether the answer's token log probabilities are asked for: by `include`, or by
        `top_logprobs` (a client asking for the likeliest tokens wants them)."""
        return LOGPROBS in (self.request.include or []) or bool(self.request.top_logprobs)


def parse_create_request(
    body: dict[str, Any],
    hosted_tools: HostedToolsPolicy = "refuse",
    *,
    input_optional: bool = False,
    mcp: McpPolicy = MCP_NOT_RUN,
    served: Collection[str] = (),
) -> ValidatedCreate:
    """`input_optional`: a request without `input` (counting a chain's or the instructions'
    tokens) has no new input items; a create needs at least one."""
    without_input = input_optional and body.get("input") is None
    if without_input:
        body = {**body, "input": []}
    for name, why in UNSUPPORTED.items():
        if body.get(name) is not None:
            raise errors.UnsupportedParameter(name, f"'{name}'", why)
    body = {key: value for key, value in body.items() if key not in UNSUPPORTED}  # their nulls mean absent
    request = validate(CreateResponseRequest, body)
    _reject_unserved_values(request)
    _check_conversation(request)
    text_format = parse_text_format(request.text.format if request.text else None)
    tools, credentials = parse_tools(request.tools, hosted_tools, mcp, served)
    runs = {served_kind(tool["type"]) for tool in tools} & set(served)
    return ValidatedCreate(
        request=request.model_copy(update={"tools": tools}),  # (with credentials redacted)
        input_items=[] if without_input else parse_input(request.input),
        text_format=text_format,
        tools=tools,
        tool_choice=parse_tool_choice(request.tool_choice, tools, served),
        runs_mcp=mcp.run and any(tool["type"] == "mcp" for tool in tools),
        runs_file_search="file_search" in runs,
        runs_web_search="web_search" in runs,
        mcp_credentials=credentials,
    )


def _check_conversation(request: CreateResponseRequest) -> None:
    """A conversation holds the context itself: no chain beside it, and no store=false (its items
    are kept in the conversation)."""
    if request.conversation is None:
        return
    if request.previous_response_id is not None:
        raise errors.InvalidRequest(
            "Mutually exclusive parameters: 'previous_response_id' and 'conversation'. Use one of them.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    if request.store is False:
        raise errors.InvalidRequest(
            "Invalid 'store': a response created in a conversation is stored with it; store must be true.",
            param="store",
            code="invalid_value",
        )


def _reject_unserved_values(request: CreateResponseRequest) -> None:
    """Values that are valid for OpenAI but would be silently ignored here: refuse them instead."""
    for index, name in enumerate(request.include or []):
        if name not in INCLUDABLE:
            raise errors.InvalidRequest(
                f"Invalid 'include[{index}]': unknown value '{name}'.", param=f"include[{index}]", code="invalid_value"
            )
    cyber = request.access_programs.cyber if request.access_programs else None
    if cyber not in (None, "standard"):
        raise errors.InvalidRequest(
            f"Invalid 'access_programs.cyber': '{cyber}' is not available on this server; only 'standard' is.",
            param="access_programs.cyber",
            code="invalid_value",
        )
    window = request.background_options.completion_window if request.background_options else None
    if window in ("2h", "8h") and (not request.background or request.stream):
        raise errors.InvalidRequest(
            f"Invalid 'background_options.completion_window': '{window}' requires background: true and no stream.",
            param="background_options.completion_window",
            code="invalid_value",
        )
    if request.image is not None and request.image.context_compression == "enabled":
        raise errors.InvalidRequest(
            "Invalid 'image.context_compression': this server does not compress image context; "
            "use 'auto' or 'disabled'.",
            param="image.context_compression",
            code="invalid_value",
        )
    if request.prompt_cache_options is not None and request.prompt_cache_options.prewarm:
        raise errors.InvalidRequest(
            "Invalid 'prompt_cache_options.prewarm': a prewarm is a WebSocket-mode create (it generates nothing).",
            param="prompt_cache_options.prewarm",
            code="invalid_value",
        )
    text_verbosity = request.text.verbosity if request.text else None
    if request.verbosity is not None and text_verbosity not in (None, request.verbosity):
        raise errors.InvalidRequest(
            "Invalid 'verbosity': it differs from 'text.verbosity'; set one of them.",
            param="verbosity",
            code="invalid_value",
        )


def echoed_settings(
    create: ValidatedCreate, max_output_tokens: int | None, defaults: SamplingDefaults | None = None
) -> dict[str, Any]:
    """The request settings a Response object echoes: what the client set, else the model's
    sampling defaults (what it is sampled with), else OpenAI's defaults."""
    request = create.request
    text = request.text or TextOptions()
    defaults = defaults or SamplingDefaults()
    return {
        "frequency_penalty": _first(request.frequency_penalty, defaults.frequency_penalty, 0.0),
        "max_output_tokens": max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "presence_penalty": _first(request.presence_penalty, defaults.presence_penalty, 0.0),
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": request.prompt_cache_retention,
        "reasoning": {
            "effort": request.reasoning.effort if request.reasoning else None,
            "summary": request.reasoning.summary if request.reasoning else None,
        },
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "auto",
        "temperature": _first(request.temperature, defaults.temperature, 1.0),
        "text": {
            "format": create.text_format,
            "verbosity": text.verbosity or request.verbosity or "medium",
        },
        "access_programs": request.access_programs.model_dump() if request.access_programs else None,
        "image": request.image.model_dump(exclude_none=True) if request.image else None,
        "prompt_cache_options": (
            request.prompt_cache_options.model_dump(exclude_none=True) if request.prompt_cache_options else None
        ),
        "tool_choice": create.tool_choice,
        "tools": create.tools,
        "top_logprobs": request.top_logprobs or 0,
        "top_p": _first(request.top_p, defaults.top_p, 1.0),
        "truncation": request.truncation or "disabled",
        "user": request.user,
        "conversation": None if create.conversation_id is None else {"id": create.conversation_id},
        "context_management": [entry.model_dump() for entry in request.context_management or []],
    }


def _first(*values: float | None) -> float | None:
    return next((value for value in values if value is not None), None)


def check_include(values: list[str]) -> None:
    """`include` of a read (a Response, its input items, a conversation's items): values OpenAI
    knows; only `file_search_call.results` changes what is shown (app/protocol/search_results.py)."""
    for index, name in enumerate(values):
        if name not in INCLUDABLE:
            raise errors.InvalidRequest(
                f"Invalid 'include[{index}]': unknown value '{name}'.", param=f"include[{index}]", code="invalid_value"
            )

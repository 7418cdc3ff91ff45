"""The bodies of the vector stores' requests (create, modify, attach a file, a file batch, update
attributes, search), checked strictly: every refusal a 400 naming the parameter.

Besides OpenAI's fields, a create takes `embedding_model` (a catalog embedding model; the
default one without it) and `embedding_dimension` (checked against that model's): the names
OGX's clients send them with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from app import errors
from app.protocol.create_request import METADATA_VALUE_CHARS, string_map_limits
from app.protocol.search_filters import Filter, parse_filter
from app.protocol.validation import StrictModel, validate

AUTO_CHUNKING = {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}  # OpenAI's `auto`
MAX_FILE_IDS = 500  # on a store's create
MAX_BATCH_FILES = 2000
ATTRIBUTE_VALUE_CHARS = 512
MAX_QUERY_CHARS = 4096  # a search query: it is embedded, and embedding costs what the text is long


class _ExpiresAfter(StrictModel):
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class _Static(StrictModel):
    max_chunk_size_tokens: int = Field(ge=100, le=4096)
    chunk_overlap_tokens: int = Field(ge=0)


class _Chunking(StrictModel):
    type: Literal["auto", "static"]
    static: _Static | None = None


class _Create(StrictModel):
    name: str | None = Field(None, max_length=256)
    description: str | None = Field(None, max_length=512)
    file_ids: list[str] | None = Field(None, max_length=MAX_FILE_IDS)
    expires_after: _ExpiresAfter | None = None
    chunking_strategy: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    embedding_model: str | None = None
    embedding_dimension: int | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, METADATA_VALUE_CHARS)


class _Modify(StrictModel):
    name: str | None = Field(None, max_length=256)
    expires_after: _ExpiresAfter | None = None
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return string_map_limits(value, METADATA_VALUE_CHARS)


class _Attach(StrictModel):
    file_id: str = Field(min_length=1)
    attributes: dict[str, str | int | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


class _BatchFile(StrictModel):
    file_id: str = Field(min_length=1)
    attributes: dict[str, str | int | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


class _Batch(StrictModel):
    file_ids: list[str] | None = Field(None, min_length=1, max_length=MAX_BATCH_FILES)
    files: list[_BatchFile] | None = Field(None, min_length=1, max_length=MAX_BATCH_FILES)
    attributes: dict[str, str | int | float | bool] | None = None
    chunking_strategy: dict[str, Any] | None = None


class _Attributes(StrictModel):
    attributes: dict[str, str | int | float | bool] | None = Field()


class _Ranking(StrictModel):
    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(0.0, ge=0, le=1)


class _Search(StrictModel):
    query: str | list[str]
    rewrite_query: bool = False
    max_num_results: int = Field(10, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: _Ranking | None = None


@dataclass(frozen=True, slots=True)
class NewStore:
    name: str | None
    description: str | None
    file_ids: list[str]
    expires_after_days: int | None
    chunking: dict[str, int]
    metadata: dict[str, str]
    embedding_model: str | None
    embedding_dimension: int | None


@dataclass(frozen=True, slots=True)
class FileToAttach:
    file_id: str
    attributes: dict[str, Any]
    chunking: dict[str, int] | None  # None: the store's


@dataclass(frozen=True, slots=True)
class Search:
    queries: list[str]
    max_num_results: int
    filters: Filter | None
    ranker: str
    score_threshold: float
    rewrite_query: bool


def chunking(raw: dict[str, Any] | None, param: str = "chunking_strategy") -> dict[str, int] | None:
    """A chunking strategy as sizes (`auto` is OpenAI's 800 and 400); None when none is given."""
    if raw is None:
        return None
    strategy = validate(_Chunking, raw, prefix=param)
    if strategy.type == "auto":
        if strategy.static is not None:
            raise _invalid(f"{param}.static", "'auto' takes no 'static'")
        return dict(AUTO_CHUNKING)
    if strategy.static is None:
        raise errors.InvalidRequest(
            f"Missing required parameter: '{param}.static'.", param=f"{param}.static", code="missing_required_parameter"
        )
    static = strategy.static
    if static.chunk_overlap_tokens > static.max_chunk_size_tokens // 2:
        raise _invalid(f"{param}.static.chunk_overlap_tokens", "it may be at most half of max_chunk_size_tokens")
    return {"max_chunk_size_tokens": static.max_chunk_size_tokens, "chunk_overlap_tokens": static.chunk_overlap_tokens}


def parse_create(body: dict[str, Any]) -> NewStore:
    create = validate(_Create, body)
    return NewStore(
        name=create.name,
        description=create.description,
        file_ids=_unique(create.file_ids or [], "file_ids"),
        expires_after_days=create.expires_after.days if create.expires_after else None,
        chunking=chunking(create.chunking_strategy) or dict(AUTO_CHUNKING),
        metadata=create.metadata or {},
        embedding_model=create.embedding_model,
        embedding_dimension=create.embedding_dimension,
    )


def parse_modify(body: dict[str, Any]) -> dict[str, Any]:
    """The changes a modify makes: `name`, `metadata`, `expires_after_days` (None: never expires)."""
    modify = validate(_Modify, body)
    changes: dict[str, Any] = {}
    if "name" in body:
        changes["name"] = modify.name
    if "metadata" in body:
        changes["metadata"] = modify.metadata or {}
    if "expires_after" in body:
        changes["expires_after_days"] = modify.expires_after.days if modify.expires_after else None
    return changes


def parse_attach(body: dict[str, Any]) -> FileToAttach:
    attach = validate(_Attach, body)
    return FileToAttach(attach.file_id, attributes(attach.attributes), chunking(attach.chunking_strategy))


def parse_batch(body: dict[str, Any]) -> list[FileToAttach]:
    batch = validate(_Batch, body)
    if (batch.file_ids is None) == (batch.files is None):
        raise errors.InvalidRequest(
            "Invalid request: send either 'file_ids' or 'files', not both and not neither.",
            param="file_ids",
            code="invalid_value",
        )
    if batch.files is not None:
        _unique([f.file_id for f in batch.files], "files")
        return [
            FileToAttach(
                f.file_id,
                attributes(f.attributes, f"files[{i}].attributes"),
                chunking(f.chunking_strategy, f"files[{i}].chunking_strategy"),
            )
            for i, f in enumerate(batch.files)
        ]
    shared_attributes = attributes(batch.attributes)
    shared_chunking = chunking(batch.chunking_strategy)
    return [
        FileToAttach(file_id, shared_attributes, shared_chunking)
        for file_id in _unique(batch.file_ids or [], "file_ids")
    ]


def parse_attributes(body: dict[str, Any]) -> dict[str, Any]:
    return attributes(validate(_Attributes, body).attributes)


def attributes(raw: dict[str, Any] | None, param: str = "attributes") -> dict[str, Any]:
    """At most 16 keys of at most 64 characters; values strings of at most 512, numbers, booleans."""
    if raw is None:
        return {}
    if len(raw) > 16:
        raise _invalid(param, f"at most 16 attributes, got {len(raw)}")
    for key, value in raw.items():
        if len(key) > 64:
            raise _invalid(f"{param}.{key[:64]}", "an attribute's key has at most 64 characters")
        if isinstance(value, str) and len(value) > ATTRIBUTE_VALUE_CHARS:
            raise _invalid(f"{param}.{key}", f"a string value has at most {ATTRIBUTE_VALUE_CHARS} characters")
    return dict(raw)


def parse_search(body: dict[str, Any]) -> Search:
    search = validate(_Search, body)
    queries = [search.query] if isinstance(search.query, str) else list(search.query)
    if not queries or any(not q.strip() for q in queries) or len(queries) > 10:
        raise _invalid("query", "expected a non-empty string, or an array of 1 to 10 of them")
    if any(len(q) > MAX_QUERY_CHARS for q in queries):
        raise _invalid("query", f"a query holds at most {MAX_QUERY_CHARS} characters")
    ranking = search.ranking_options or _Ranking()
    return Search(
        queries=queries,
        max_num_results=search.max_num_results,
        filters=None if search.filters is None else parse_filter(search.filters, "filters"),
        ranker=ranking.ranker,
        score_threshold=ranking.score_threshold,
        rewrite_query=search.rewrite_query,
    )


def _unique(ids: list[str], param: str) -> list[str]:
    seen: set[str] = set()
    for index, file_id in enumerate(ids):
        if file_id in seen:
            raise _invalid(f"{param}[{index}]", f"'{file_id}' is listed twice")
        seen.add(file_id)
    return ids


def _invalid(param: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"Invalid '{param}': {why}.", param=param, code="invalid_value")

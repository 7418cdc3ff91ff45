"""The model catalog: which models this deployment serves and which runtime serves each one.

A TOML file (path in RESPONSES_MODELS) with one `[[models]]` table per model; see
`models.example.toml` and the README.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app import errors


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    runtime: Literal["openai"]
    base_url: str | None = None
    upstream_model: str | None = None
    # Name of the environment variable holding the upstream server's API key, if it wants one.
    api_key_env: str | None = None
    context_window: int = Field(8192, gt=0)
    max_output_tokens: int = Field(4096, gt=0)

    @model_validator(mode="after")
    def _openai_runtime_needs_base_url(self) -> ModelEntry:
        if self.runtime == "openai" and not self.base_url:
            raise ValueError(f"model {self.id!r}: runtime 'openai' needs base_url")
        return self

    @property
    def served_name(self) -> str:
        """The model name sent to the runtime."""
        return self.upstream_model or self.id


class CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelEntry]


class CatalogError(Exception):
    """The catalog file is missing or malformed."""


@dataclass(frozen=True)
class Catalog:
    by_name: dict[str, ModelEntry]

    @classmethod
    def from_entries(cls, entries: list[ModelEntry]) -> Catalog:
        by_name: dict[str, ModelEntry] = {}
        for entry in entries:
            for name in (entry.id, *entry.aliases):
                if name in by_name:
                    raise CatalogError(f"model name {name!r} is listed twice")
                by_name[name] = entry
        return cls(by_name)

    @classmethod
    def load(cls, path: Path) -> Catalog:
        try:
            raw = tomllib.loads(path.read_text())
            return cls.from_entries(CatalogFile.model_validate(raw).models)
        except FileNotFoundError as exc:
            raise CatalogError(f"model catalog {path} not found (set RESPONSES_MODELS)") from exc
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise CatalogError(f"model catalog {path} is invalid: {exc}") from exc

    def resolve(self, name: str) -> ModelEntry:
        try:
            return self.by_name[name]
        except KeyError:
            raise errors.InvalidRequest(
                f"The requested model '{name}' does not exist.", param="model", code="model_not_found"
            ) from None

"""Postgres access: the schema and one repository module per table family."""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy import Row

DbRow: TypeAlias = Row[*tuple[Any, ...]]

"""DATABASE_URL: the server talks to asyncpg itself, so any PostgreSQL URL means asyncpg's, and
another driver is refused when the settings are read, naming the variable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


@pytest.mark.parametrize(
    "given",
    [
        "postgresql+asyncpg://app@db:5432/responses",
        "postgresql://app@db:5432/responses",
        "postgres://app@db:5432/responses",
    ],
)
def test_a_postgresql_url_means_asyncpg(given: str) -> None:
    assert Settings(DATABASE_URL=given).database_url == "postgresql+asyncpg://app@db:5432/responses"


@pytest.mark.parametrize("given", ["postgresql+psycopg://app@db/responses", "mysql://app@db/responses", "responses"])
def test_another_driver_is_refused_naming_the_variable(given: str) -> None:
    with pytest.raises(ValidationError, match="DATABASE_URL") as refused:
        Settings(DATABASE_URL=given)
    assert "postgresql+asyncpg://" in str(refused.value)

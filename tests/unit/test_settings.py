"""DATABASE_URL: the server talks to asyncpg itself, so any PostgreSQL URL means asyncpg's, and
another driver is refused when the settings are read, naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

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


def test_the_database_password_comes_from_its_file(tmp_path: Path) -> None:
    secret = tmp_path / "postgres_password"
    secret.write_text("s3cr:t/@x\n")  # characters a URL must escape, and the newline a file ends with
    settings = Settings(DATABASE_URL="postgresql://app@db:5432/responses", RESPONSES_DATABASE_PASSWORD_FILE=str(secret))
    assert make_url(settings.database_url).password == "s3cr:t/@x"
    assert make_url(settings.database_url).host == "db" and settings.database_url.startswith("postgresql+asyncpg://")

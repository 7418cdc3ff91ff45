"""DATABASE_URL: the server talks to asyncpg itself, so any PostgreSQL URL means asyncpg's, and
another driver is refused when the settings are read, naming the variable; a list of servers is
tried in turn. And an interval that must be positive is refused otherwise."""

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


@pytest.mark.parametrize(
    "given",
    [
        "postgresql://app@db1:5432,db2:5433/responses?target_session_attrs=read-write",  # libpq's list
        "postgresql+asyncpg://app@/responses?target_session_attrs=read-write&host=db1:5432&host=db2:5433",
    ],
)
def test_several_servers_are_tried_in_turn_for_a_read_write_one(given: str) -> None:
    """A failover pair: asyncpg tries each host (SQLAlchemy's form, one `host` parameter each)."""
    url = make_url(Settings(DATABASE_URL=given).database_url)
    assert url.drivername == "postgresql+asyncpg" and url.host is None and url.database == "responses"
    assert url.query == {"target_session_attrs": "read-write", "host": ("db1:5432", "db2:5433")}


def test_the_password_file_keeps_a_list_of_servers(tmp_path: Path) -> None:
    secret = tmp_path / "postgres_password"
    secret.write_text("pw\n")
    settings = Settings(DATABASE_URL="postgresql://app@db1,db2/responses", RESPONSES_DATABASE_PASSWORD_FILE=str(secret))
    url = make_url(settings.database_url)
    assert url.password == "pw" and url.query["host"] == ("db1", "db2")


@pytest.mark.parametrize("given", ["0", "-1"])
def test_the_live_logs_vacuum_needs_a_positive_interval(given: str) -> None:
    """(A worker would vacuum in a loop without pause.)"""
    with pytest.raises(ValidationError, match="RESPONSES_LIVE_LOG_VACUUM_SECONDS"):
        Settings(RESPONSES_LIVE_LOG_VACUUM_SECONDS=given)

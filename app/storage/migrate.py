"""Bringing a database's schema up to date: alembic's upgrade to the newest revision."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations
from app.settings import Settings


def migrate(settings: Settings) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", settings.database_url)
    command.upgrade(config, "head")

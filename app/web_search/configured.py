"""The search backend a deployment configured, if any."""

from __future__ import annotations

from app.settings import Settings
from app.web_search.backend import SearchBackend
from app.web_search.searxng import SearxngBackend


def configured_backend(settings: Settings) -> SearchBackend | None:
    if not settings.web_search_url:
        return None
    return SearxngBackend(settings.web_search_url, settings.web_search_timeout_seconds)

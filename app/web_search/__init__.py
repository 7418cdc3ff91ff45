"""The web search backends the server's `web_search` tool asks (app/protocol/web_search.py): one
small interface (backend.py), one module per backend (SearXNG's JSON API: searxng.py)."""

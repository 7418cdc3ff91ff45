"""An MCP tool's credentials on their way from the create to the worker that makes its calls.

Invariant 5: never stored, echoed or logged. They cannot travel in Postgres, and the worker
that runs (or, after a crash, continues) the response is not the API process that received
them, so they wait in Redis under the response's id, sealed with the deployment's key
(app/protocol/mcp_tools.py `seal_credentials`): Redis holds ciphertext only, for as long as the
response runs (its job's timeout at most), and its end deletes it. A response whose credentials
are gone (Redis flushed) makes its MCP requests without them, and the MCP server's refusal is
what the model and the client see.
"""

from __future__ import annotations

from redis.asyncio import Redis

from app.queue.redis_keys import MCP_CREDENTIALS_PREFIX


async def keep(redis: Redis, response_id: str, sealed: str, ttl: int) -> None:
    await redis.set(MCP_CREDENTIALS_PREFIX + response_id, sealed, ex=ttl)


async def take(redis: Redis, response_id: str) -> str | None:
    """The response's sealed credentials, if it has any (still)."""
    sealed = await redis.get(MCP_CREDENTIALS_PREFIX + response_id)
    return sealed.decode() if isinstance(sealed, bytes) else sealed


async def forget(redis: Redis, response_id: str) -> None:
    await redis.delete(MCP_CREDENTIALS_PREFIX + response_id)

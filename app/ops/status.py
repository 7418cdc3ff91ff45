"""What `responses-server status` prints: the queue of each model (from PostgreSQL's `queue_health`
view) and the workers alive, with what they serve, run and whether their model server is up (each
worker's heartbeat in Redis, refreshed by its housekeeping)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue.heartbeats import workers_alive


async def queue_health(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT * FROM queue_health ORDER BY model"))
        return [dict(row._mapping) for row in rows]


def _age(value: Any) -> str:
    return "-" if value is None else f"{value.total_seconds():.0f}s"


async def report(engine: AsyncEngine, redis: Redis) -> str:
    lines = ["queue (PostgreSQL):"]
    queues = await queue_health(engine)
    for q in queues:
        lines.append(
            f"  {q['model']}: {q['queued']} queued (oldest {_age(q['oldest_queued_for'])}), "
            f"{q['in_progress']} in progress (longest {_age(q['longest_running_for'])}), "
            f"{q['leases_expiring_in_10s']} leases lapsing"
        )
    if not queues:
        lines.append("  nothing queued or running")
    lines.append("workers (Redis heartbeats):")
    workers = await workers_alive(redis)
    for w in workers:
        runtime = "" if w["runtime"] is None else f", model server {w['runtime']}"
        models = ", ".join(w["models"]) or "(no model)"
        draining = ", shutting down" if w.get("draining") else ""
        lines.append(f"  {w['worker_id']}: {models}; running {w['running']} of {w['max_jobs']}{runtime}{draining}")
    if not workers:
        lines.append("  none alive")
    return "\n".join(lines)

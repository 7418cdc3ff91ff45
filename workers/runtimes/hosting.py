"""A worker that hosts a model: it starts the model's server, and serves that model's queue."""

from __future__ import annotations

import os

from app.catalog import Catalog, HostedModel, model_queue
from workers.runtimes.launch import LaunchError, server_command, server_environment, server_port
from workers.runtimes.supervisor import RuntimeSupervisor


def hosted_model(catalog: Catalog, model_name: str) -> HostedModel:
    """The catalog entry a `worker --model NAME` hosts; LaunchError if it cannot host it."""
    entry = catalog.by_name.get(model_name) or catalog.embeddings_by_name.get(model_name)
    if entry is None:
        raise LaunchError(f"model {model_name!r} is not in the catalog")
    hosted = catalog.hosted(model_name)
    if hosted is None:
        raise LaunchError(
            f"model {entry.id!r} (runtime {entry.runtime!r}) is not started by a worker: "
            "any `responses-server worker` without --model serves it"
        )
    return hosted


def hosted_queue(catalog: Catalog, model_name: str, base_queue: str) -> str:
    return model_queue(base_queue, hosted_model(catalog, model_name).id)


async def start_model_server(catalog: Catalog, model_name: str) -> tuple[Catalog, RuntimeSupervisor]:
    """Starts the hosted model's server and waits until it answers; returns the catalog with that
    model pointed at it, and the supervisor that keeps it running."""
    entry = hosted_model(catalog, model_name)
    port = server_port(entry)
    base_url = f"http://127.0.0.1:{port}/v1"
    supervisor = RuntimeSupervisor(
        entry.id,
        server_command(entry, port),
        base_url,
        entry.startup_timeout_seconds,
        env=server_environment(entry, os.environ),
    )
    await supervisor.start()
    return catalog.replaced(entry.model_copy(update={"base_url": base_url})), supervisor

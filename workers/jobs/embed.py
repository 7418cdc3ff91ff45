"""The `embed_texts` job: texts embedded by the embedding model this worker hosts, for a process
that cannot reach its server (app/embeddings/embedders.py `WorkerEmbedder`). The vectors, or the
failure as the asker reports it, go to the Redis key the asker waits on."""

from __future__ import annotations

from typing import Any

from app.embeddings.embedders import EmbeddingFailed
from app.queue import replies
from workers.runtime_failure import RuntimeFailure
from workers.state import WorkerState


async def embed_texts(ctx: dict[str, Any], reply_id: str, model_id: str, texts: list[str]) -> None:
    state: WorkerState = ctx["state"]
    answer: dict[str, Any]
    entry = state.catalog.embeddings_by_name.get(model_id)
    if entry is None:
        answer = {"error": f"the embedding model '{model_id}' is not in this worker's catalog"}
    else:
        try:
            if state.supervisor is not None:  # its server may be restarting
                await state.supervisor.wait_healthy(state.supervisor.startup_timeout)
            embedded = await state.embedders.of(entry).embed(texts)
            answer = {"vectors": embedded.vectors, "tokens": embedded.tokens}
        except (EmbeddingFailed, RuntimeFailure) as exc:
            answer = {"error": str(exc)}
    await replies.answer(state.redis, reply_id, answer)

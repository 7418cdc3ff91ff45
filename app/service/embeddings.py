"""`POST /v1/embeddings`, answered by a catalog embedding model (in this process for the
embedded one, by its server for an external one)."""

from __future__ import annotations

from typing import Any

from app import errors
from app.embeddings.embedders import EmbeddingFailed
from app.protocol import embeddings_request
from app.service.state import AppState


async def create(state: AppState, body: dict[str, Any]) -> dict[str, Any]:
    asked = embeddings_request.parse(body)
    model = state.catalog.embedding_model(asked.model)
    if asked.dimensions is not None and asked.dimensions != model.dimensions:
        raise errors.InvalidRequest(
            f"Invalid 'dimensions': the model '{model.id}' makes vectors of {model.dimensions} dimensions only.",
            param="dimensions",
            code="invalid_value",
        )
    try:
        embedded = await state.embedders.of(model).embed(asked.texts)
    except EmbeddingFailed as failed:
        raise errors.ServiceUnavailable(f"The embedding model '{model.id}' failed: {failed}.") from None
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": index,
                "embedding": embeddings_request.encoded(vector, asked.encoding_format),
            }
            for index, vector in enumerate(embedded.vectors)
        ],
        "model": model.id,
        "usage": {"prompt_tokens": embedded.tokens, "total_tokens": embedded.tokens},
    }

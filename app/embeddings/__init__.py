"""Embeddings: texts as vectors, from a catalog embedding model (an OpenAI-compatible
`/v1/embeddings` server, or the embedded CPU model shipped in a package)."""

"""The functions arq runs: a response's generation (claim, stream, end in one terminal status)
and a token count. Each takes the worker's state from arq's context."""

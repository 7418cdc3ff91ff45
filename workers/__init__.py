"""The worker process (`responses-server worker`), from the top: worker.py (arq's worker with its
jobs), jobs/ (what arq runs), state.py (what a worker holds and keeps running), health_port.py;
below them mcp/ (the MCP servers a response's tools call), runtimes/ (the model servers: I/O),
translation/ (Responses to Chat Completions and back: pure), caches/ (the chains and
conversations a worker keeps decoded), leases.py and runtime_failure.py."""

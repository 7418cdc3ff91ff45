"""The worker process (`responses-server worker`): arq's worker with its jobs (process.py), what it
holds (state.py), its own HTTP port (health_port.py), generation/ and runtimes/, and retention."""

"""The worker process (`responses-server worker`), from the top: process.py (arq's worker with its
jobs), jobs/ (what arq runs), state.py (what a worker holds and keeps running), health_port.py;
below them event_log/ (the writer), leases.py, retention.py and runtimes/ (the model servers)."""

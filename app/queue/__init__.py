"""The queue and Redis: the only place that knows arq (jobs enqueued, taken and removed; stop
signals; wake-ups; whether a job waits or runs; the token-count call) and Redis's key layout,
outages and subscriptions."""

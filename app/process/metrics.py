"""Prometheus metrics of a process: an API process serves them at `GET /metrics`, a worker on its
own port (workers/health_port.py). Each process counts for itself; Prometheus sums the replicas.
docs/metrics.md lists them with the scrape configuration and a Grafana dashboard.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)

# No `_created` series beside each counter: noise to a scraper.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)  # CPU, memory, open files of the process

# The API's.
HTTP_REQUESTS = Counter(
    "responses_http_requests",
    "HTTP requests answered, by route, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
CREATED = Counter(
    "responses_created",
    "Responses accepted, by model and mode (json, stream, background).",
    ["model", "mode"],
    registry=REGISTRY,
)
LIVE_STREAMS = Gauge(
    "responses_live_streams", "SSE streams and JSON answers following a response now.", registry=REGISTRY
)
QUEUED = Gauge("responses_queued", "Responses waiting for a worker, by model.", ["model"], registry=REGISTRY)
OLDEST_QUEUED = Gauge(
    "responses_oldest_queued_seconds",
    "How long the oldest waiting response has waited, by model.",
    ["model"],
    registry=REGISTRY,
)
IN_PROGRESS = Gauge(
    "responses_in_progress", "Responses a worker is generating, by model.", ["model"], registry=REGISTRY
)
HOSTED_TOOLS_NOT_OFFERED = Counter(
    "responses_hosted_tools_not_offered",
    "Hosted tools (web_search, file_search…) a request listed that were echoed but not offered to the "
    "model (RESPONSES_HOSTED_TOOLS=ignore), by tool type.",
    ["type"],
    registry=REGISTRY,
)

PLACEMENTS = Counter(
    "responses_placements",
    "Responses that continue a context, by where they went: placed on the worker holding it, "
    "unplaced (none known, gone or draining), handed on by a worker with no free slot.",
    ["outcome"],
    registry=REGISTRY,
)

# The workers'.
FINISHED = Counter(
    "responses_finished", "Generations ended, by model and final status.", ["model", "status"], registry=REGISTRY
)
TIME_TO_FIRST_TOKEN = Histogram(
    "responses_time_to_first_token_seconds",
    "From a response's creation to its first output token, by model.",
    ["model"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
START_STEP = Histogram(
    "responses_start_step_seconds",
    "Each step of a generation's start, by model: queued (its job's enqueueing to a worker going for"
    " it), take, claim, ask (the take to the runtime request), first_token (the runtime request to its"
    " first output token).",
    ["model", "step"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
OUTPUT_TOKENS = Counter(
    "responses_output_tokens",
    "Output tokens generated, by model (their rate is tokens/s).",
    ["model"],
    registry=REGISTRY,
)
INPUT_TOKENS = Counter(
    "responses_input_tokens", "Input tokens of ended generations, by model.", ["model"], registry=REGISTRY
)
CACHED_INPUT_TOKENS = Counter(
    "responses_cached_input_tokens",
    "Input tokens of ended generations that the model's server found in its prefix cache, by model.",
    ["model"],
    registry=REGISTRY,
)
CHAIN_ITEMS_READ = Counter(
    "responses_worker_chain_items",
    "Items of chains (previous_response_id) the claims of this worker's generations used, by where "
    "they came from: its copy of the chain's branch (cache) or Postgres.",
    ["source"],
    registry=REGISTRY,
)
CONVERSATION_ITEMS_READ = Counter(
    "responses_worker_conversation_items",
    "Conversation items the claims of this worker's generations used, by where they came from: "
    "its copy of the conversation (cache) or Postgres.",
    ["source"],
    registry=REGISTRY,
)

# Both (whichever process does it).
REAPED = Counter("responses_reaped", "Running responses failed because their worker's lease lapsed.", registry=REGISTRY)
CONTINUED = Counter(
    "responses_continued",
    "Running responses whose worker stopped or died, continued by another worker from their last event.",
    registry=REGISTRY,
)
REQUEUED = Counter("responses_requeued", "Queued responses enqueued again after Redis lost them.", registry=REGISTRY)
WEBHOOK_DELIVERIES = Counter(
    "responses_webhook_deliveries",
    "Webhook delivery attempts by outcome: delivered, retried (due again later) or given up.",
    ["outcome"],
    registry=REGISTRY,
)
WEBHOOK_OLDEST_PENDING = Gauge(
    "responses_webhook_oldest_pending_seconds",
    "How long the oldest webhook delivery not yet delivered or given up has waited.",
    registry=REGISTRY,
)
REDIS_UP = Gauge(
    "responses_redis_up",
    "1 while this process reaches Redis, 0 during an outage (app/queue/redis_link.py).",
    registry=REGISTRY,
)
REDIS_OUTAGES = Counter(
    "responses_redis_outages", "Redis outages this process rode out (or is riding out).", registry=REGISTRY
)
RETENTION_REMOVED = Counter(
    "responses_retention_removed",
    "Rows retention removed, by kind (responses, or event logs).",
    ["kind"],
    registry=REGISTRY,
)
RETENTION_BEHIND = Gauge(
    "responses_retention_behind_seconds",
    "How long the oldest row retention has still to remove has been due.",
    ["kind"],
    registry=REGISTRY,
)

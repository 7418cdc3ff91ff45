"""Every Redis key and channel name, in one place. Redis carries signals only (design invariant 1)."""

from __future__ import annotations

# Committed events, published after their commit: one message per commit, carrying every
# response's events (app/events/channel.py), on one channel per deployment (its queue name).
EVENTS_CHANNEL_PREFIX = "responses:events:"
# Ask the worker running a response to stop it (cancel, client disconnect, delete); payload: the id.
STOP_CHANNEL = "responses:stop"
# Ask the worker running a response to end it at its next output boundary (WebSocket steering);
# payload: the id.
STEER_CHANNEL = "responses:steer"
# The generate job's name in the arq queue; its job id is the response id.
GENERATE_JOB = "generate"
# The job counting a request's input tokens (POST /v1/responses/input_tokens); its id is its own.
COUNT_TOKENS_JOB = "count_input_tokens"
# The job ingesting one file into one vector store (chunks, embeddings); its id names both and
# the attempt (a lapsed one is enqueued again under a new id).
INGEST_JOB = "ingest_file"
# The job embedding texts with a model only its worker reaches (runtime vllm); its id is its own.
EMBED_JOB = "embed_texts"
# A worker's answer to a call (app/queue/replies.py), pushed by the worker, popped by the asker.
REPLY_PREFIX = "responses:reply:"
REPLY_TTL_SECONDS = 60  # an answer nobody popped (its request gave up) goes


def events_channel(queue_name: str) -> str:
    return EVENTS_CHANNEL_PREFIX + queue_name


# The events of a transient response too large for the events channel, under
# `<prefix><response_id>:<first sequence number>`, read once by its follower (app/events/channel.py).
OVERFLOW_PREFIX = "responses:overflow:"
OVERFLOW_TTL_SECONDS = 300

# Set (NX) by the worker that takes a store=false response: its "claim", since Postgres has no row.
TRANSIENT_CLAIM_PREFIX = "responses:claim:"
# Refreshed by the worker while it generates a store=false response (no Postgres lease for those).
ALIVE_PREFIX = "responses:alive:"
# The credentials (sealed) of a running response's MCP tools: written by its create, read by the
# worker that runs it (or continues it), deleted at its end; they expire with its job's timeout.
MCP_CREDENTIALS_PREFIX = "responses:mcp-credentials:"
# Each worker's heartbeat (`responses-server status`): JSON of what it serves and runs, refreshed
# by its housekeeping, gone a while after it stops.
WORKER_PREFIX = "responses:workers:"

# An account's requests and tokens counted per window: `<prefix>requests:<account>:<window>` and
# `<prefix>tokens:<account>:<window>`, expiring with the window (app/queue/rate_counters.py).
LIMIT_PREFIX = "responses:limits:"


def refusals_key(account_id: str, day: int) -> str:
    """An account's creates refused (429) on one day (days since the epoch, UTC), for the console."""
    return f"{LIMIT_PREFIX}refused:{account_id}:{day}"


# Published after each enqueue, so workers start the job at once instead of at their next poll.
WAKE_CHANNEL_PREFIX = "responses:wake:"


def wake_channel(queue_name: str) -> str:
    return WAKE_CHANNEL_PREFIX + queue_name


def placed_channel(queue_name: str, worker_id: str) -> str:
    """Where one worker hears of the jobs placed on it (app/queue/placement.py)."""
    return f"{WAKE_CHANNEL_PREFIX}{queue_name}:{worker_id}"


# The workers taking a queue's jobs (`<prefix><queue>` → their ids), kept by their heartbeats, and
# each one's jobs taken and not yet ended (`<load prefix><worker id>`), kept by its take and
# removal scripts: what placement balances by (app/queue/placement.py).
QUEUE_WORKERS_PREFIX = "responses:queue-workers:"
LOAD_PREFIX = "responses:load:"
LOAD_TTL_SECONDS = 86_400  # (a crashed worker's count goes with it; a live one's is refreshed by each take)

# The worker whose engine last ran a context: `<prefix><context>` → worker id, written by the
# worker when it starts a response, read by the enqueue of the response that continues it.
PLACEMENT_PREFIX = "responses:placement:"
PLACEMENT_TTL_SECONDS = 3600  # (an engine's prefix cache rarely holds a context idle longer)

"""Configuration, read from the environment (docs/configuration.md lists every variable)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url


class Settings(BaseSettings):
    """Every knob of the API and the workers; build one with `Settings()` where a process starts."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    database_url: str = Field("postgresql+asyncpg://postgres@127.0.0.1:5432/responses", alias="DATABASE_URL")
    redis_url: str = Field("redis://127.0.0.1:6379/0", alias="REDIS_URL")

    @field_validator("database_url")
    @classmethod
    def _for_asyncpg(cls, url: str) -> str:
        """The hot statements talk to asyncpg itself (app/storage/driver.py): a plain postgresql://
        URL means asyncpg's, and any other driver is refused here rather than deep in a request."""
        scheme, separator, rest = url.partition("://")
        if not separator or scheme not in ("postgresql", "postgres", "postgresql+asyncpg"):
            raise ValueError("must be a PostgreSQL URL for asyncpg: postgresql+asyncpg://… (or postgresql://…)")
        return f"postgresql+asyncpg://{_hosts_as_parameters(rest)}"

    # The database password, read from a file (a container secret) rather than put in the URL.
    database_password_file: Path | None = Field(None, alias="RESPONSES_DATABASE_PASSWORD_FILE")

    @model_validator(mode="after")
    def _password_from_file(self) -> Settings:
        if self.database_password_file is not None:
            password = self.database_password_file.read_text().strip()
            url = make_url(self.database_url).set(password=password)
            self.database_url = url.render_as_string(hide_password=False)
        return self

    models_path: Path = Field(Path("models.toml"), alias="RESPONSES_MODELS")
    queue_name: str = Field("responses:queue", alias="RESPONSES_QUEUE")
    # Connections each process keeps open, and how many more it may open for a burst (those are
    # closed again at once, which costs Postgres a new backend each time: keep bursts rare).
    db_pool_size: int = Field(40, alias="RESPONSES_DB_POOL_SIZE")
    db_max_overflow: int = Field(10, alias="RESPONSES_DB_MAX_OVERFLOW")
    # How long a request waits for a free connection before it is answered 503 (with Retry-After).
    db_pool_timeout: float = Field(5.0, alias="RESPONSES_DB_POOL_TIMEOUT")
    # The window of accounts' requests and tokens per minute (app/service/admission.py): a minute, but tests shorten it.
    limit_window_seconds: int = Field(60, gt=0, alias="RESPONSES_LIMIT_WINDOW_SECONDS")
    # Log lines as text (a person reads them) or one JSON object each (a collector parses them).
    log_format: Literal["text", "json"] = Field("text", alias="RESPONSES_LOG_FORMAT")
    # A worker's own HTTP port for /health, /ready and /metrics (workers/health_port.py); unset: none.
    worker_port: int | None = Field(None, alias="RESPONSES_WORKER_PORT")

    # Tools OpenAI hosts (web_search, file_search, code_interpreter…) that no model here can run:
    # `ignore` echoes them and leaves them out of what the model is offered (Codex sends
    # web_search by default); `refuse` answers a 400 naming the tool.
    hosted_tools: Literal["ignore", "refuse"] = Field("ignore", alias="RESPONSES_HOSTED_TOOLS")

    # The keys that seal reasoning for clients (include reasoning.encrypted_content): Fernet keys,
    # comma-separated, or one per line in a file; the first seals, all open (app/protocol/sealing.py).
    # With none, encrypted_content stays null.
    encryption_keys: str | None = Field(None, alias="RESPONSES_ENCRYPTION_KEYS")
    encryption_key_file: Path | None = Field(None, alias="RESPONSES_ENCRYPTION_KEY_FILE")

    # Image and file URLs (input_image image_url, input_file file_url): `fetch` them here, through
    # the egress guard (app/process/url_fetch.py), or `off` (only data: URLs and file ids are
    # taken). ALLOW: networks (CIDR, comma-separated) fetched from although not public, such as
    # an internal image store.
    image_urls: Literal["fetch", "off"] = Field("fetch", alias="RESPONSES_IMAGE_URLS")
    image_fetch_allow: str = Field("", alias="RESPONSES_IMAGE_FETCH_ALLOW")
    image_fetch_timeout: float = Field(10.0, gt=0, alias="RESPONSES_IMAGE_FETCH_TIMEOUT")

    # Remote MCP tools (`type: "mcp"`, workers/tool_loop/): `run` them here, or `off` (then they are
    # hosted tools, as RESPONSES_HOSTED_TOOLS says). SERVER_URLS: URL prefixes (comma-separated)
    # of the only MCP servers connected to; empty: any, through the egress guard. ALLOW: networks
    # of private addresses an MCP server may have. A call may take CALL_TIMEOUT; a response's
    # MCP requests together RESPONSE_TIMEOUT; a tool's output is cut at MAX_OUTPUT_BYTES; a
    # response makes at most MAX_ROUNDS inference requests (then it ends `incomplete`).
    mcp: Literal["run", "off"] = Field("run", alias="RESPONSES_MCP")
    mcp_server_urls: str = Field("", alias="RESPONSES_MCP_SERVER_URLS")
    mcp_allow: str = Field("", alias="RESPONSES_MCP_ALLOW")
    mcp_call_timeout_seconds: float = Field(60.0, gt=0, alias="RESPONSES_MCP_CALL_TIMEOUT_SECONDS")
    mcp_response_timeout_seconds: float = Field(600.0, gt=0, alias="RESPONSES_MCP_RESPONSE_TIMEOUT_SECONDS")
    mcp_max_output_bytes: int = Field(1024 * 1024, gt=0, alias="RESPONSES_MCP_MAX_OUTPUT_BYTES")
    mcp_max_rounds: int = Field(10, ge=1, alias="RESPONSES_MCP_MAX_ROUNDS")

    # The `web_search` tool (app/protocol/web_search.py): the address of the SearXNG instance
    # searched (its JSON API enabled); unset, web_search tools are hosted tools, as
    # RESPONSES_HOSTED_TOOLS says. One search may take TIMEOUT_SECONDS (then it failed).
    web_search_url: str = Field("", alias="RESPONSES_WEB_SEARCH_URL")
    web_search_timeout_seconds: float = Field(10.0, gt=0, alias="RESPONSES_WEB_SEARCH_TIMEOUT_SECONDS")
    # The pages a web search opens are fetched through the egress guard: public addresses only,
    # or these networks (CIDR, comma-separated); the same time limit, at most MAX_BYTES each.
    web_fetch_allow: str = Field("", alias="RESPONSES_WEB_FETCH_ALLOW")
    web_fetch_max_bytes: int = Field(5 * 1024 * 1024, gt=0, alias="RESPONSES_WEB_FETCH_MAX_BYTES")

    # How long POST /v1/responses/input_tokens waits for a worker of the model to count (503 after).
    count_timeout: int = Field(30, gt=0, alias="RESPONSES_COUNT_TIMEOUT")
    # How long a process waits for the worker hosting an embedding model (runtime vllm) to embed
    # texts it asked for (a search's query, POST /v1/embeddings): the call fails after it.
    embed_timeout: float = Field(60.0, gt=0, alias="RESPONSES_EMBED_TIMEOUT")

    max_body_bytes: int = Field(16 * 1024 * 1024, alias="RESPONSES_MAX_BODY_BYTES")
    # Files (app/service/files.py): the largest file an upload may send (OpenAI's 512 MB at most),
    # and the bytes of files an account may keep together. An upload past either is refused
    # while it streams (413), nothing kept.
    file_max_bytes: int = Field(512 * 1000 * 1000, gt=0, le=512 * 1000 * 1000, alias="RESPONSES_FILE_MAX_BYTES")
    account_files_max_bytes: int = Field(100 * 1000**3, gt=0, alias="RESPONSES_ACCOUNT_FILES_MAX_BYTES")
    # An upload whose body stalls this long is refused (a client that never finishes its body).
    upload_idle_seconds: float = Field(60.0, gt=0, alias="RESPONSES_UPLOAD_IDLE_SECONDS")
    # input_file parts (app/service/file_inputs.py): the bytes of the files one request's input may
    # hold together (OpenAI's 32 MB), and the time and memory reading one of them may take (it is
    # read in a child process: a hostile document fails only itself).
    input_files_max_bytes: int = Field(32 * 1000 * 1000, gt=0, alias="RESPONSES_INPUT_FILES_MAX_BYTES")
    document_read_seconds: float = Field(30.0, gt=0, alias="RESPONSES_DOCUMENT_READ_SECONDS")
    document_read_memory_mb: int = Field(1024, gt=0, alias="RESPONSES_DOCUMENT_READ_MEMORY_MB")
    # A file attached to a vector store may take this long to read on a worker (then it fails).
    ingest_read_seconds: float = Field(600.0, gt=0, alias="RESPONSES_INGEST_READ_SECONDS")
    # WebSocket mode (app/service/socket_session.py): how long a socket may stay open (OpenAI's
    # 60 minutes; then `websocket_connection_limit_reached` and a close, once its responses
    # end), how long one with nothing running may stay silent before it is closed, and the
    # largest frame a client may send (a larger one closes the socket with 1009).
    websocket_max_seconds: float = Field(3600.0, gt=0, alias="RESPONSES_WEBSOCKET_MAX_SECONDS")
    websocket_idle_seconds: float = Field(900.0, gt=0, alias="RESPONSES_WEBSOCKET_IDLE_SECONDS")
    websocket_max_message_bytes: int = Field(16 * 1024 * 1024, gt=0, alias="RESPONSES_WEBSOCKET_MAX_MESSAGE_BYTES")
    # A follower with nothing to read re-checks Postgres this often: it heals a missed
    # Redis message and keeps SSE connections alive through proxies.
    follow_idle_seconds: float = Field(5.0, alias="RESPONSES_FOLLOW_IDLE_SECONDS")
    # A store=false stream, whose events travel only through Redis, waits this long for Redis to
    # come back before it ends with an error naming Redis (durable streams read Postgres meanwhile).
    redis_outage_seconds: float = Field(60.0, gt=0, alias="RESPONSES_REDIS_OUTAGE_SECONDS")
    # How long a Postgres outage may last with nothing lost: workers retry their commits this long
    # (then fail their generations), and streams wait this long, kept alive, for the events.
    postgres_outage_seconds: float = Field(60.0, gt=0, alias="RESPONSES_POSTGRES_OUTAGE_SECONDS")

    # Webhooks (app/housekeeping/webhook_delivery.py): networks of private addresses an endpoint may
    # have (comma-separated), how long an attempt may take, the first retry's delay (doubled per
    # attempt up to an hour, with jitter), when a delivery is given up, how often a process looks
    # for due deliveries besides being told, and how many it sends at once.
    webhook_allow: str = Field("", alias="RESPONSES_WEBHOOK_ALLOW")
    webhook_timeout_seconds: float = Field(10.0, gt=0, alias="RESPONSES_WEBHOOK_TIMEOUT_SECONDS")
    webhook_retry_seconds: float = Field(5.0, gt=0, alias="RESPONSES_WEBHOOK_RETRY_SECONDS")
    webhook_give_up_hours: float = Field(72.0, gt=0, alias="RESPONSES_WEBHOOK_GIVE_UP_HOURS")
    webhook_poll_seconds: float = Field(2.0, gt=0, alias="RESPONSES_WEBHOOK_POLL_SECONDS")
    webhook_concurrency: int = Field(64, gt=0, alias="RESPONSES_WEBHOOK_CONCURRENCY")

    # The least time between two of a worker's commits of streaming output (its first token and
    # its end are committed at once): the deltas of a response that wait for the same commit are
    # merged, which is what a token costs Postgres, Redis and the API (docs/capacity.md). Each
    # delta reaches its followers up to this much later; 0 commits as fast as Postgres allows.
    event_commit_interval: float = Field(0.05, ge=0, le=1, alias="RESPONSES_EVENT_COMMIT_INTERVAL_SECONDS")
    worker_max_jobs: int = Field(256, alias="RESPONSES_WORKER_MAX_JOBS")
    # A response continuing a context waits at most this long for the worker whose engine holds
    # it (app/queue/placement.py) before any worker may take it; 0 places nothing.
    placement_wait_ms: int = Field(250, ge=0, le=10_000, alias="RESPONSES_PLACEMENT_WAIT_MS")
    worker_poll_delay: float = Field(1.0, alias="RESPONSES_WORKER_POLL_DELAY")
    job_timeout_seconds: int = Field(6 * 3600, alias="RESPONSES_JOB_TIMEOUT_SECONDS")
    lease_seconds: float = Field(30.0, alias="RESPONSES_LEASE_SECONDS")
    # A generation whose worker stopped or died is continued by another worker from its last
    # committed event, at most this many times; then it ends `failed`.
    max_continuations: int = Field(3, ge=0, alias="RESPONSES_MAX_CONTINUATIONS")
    # The items of the conversations a worker served, kept decoded so that their next turns read
    # only what joined since: megabytes of their JSON (their Python objects take a few times more).
    conversation_cache_mb: float = Field(32.0, ge=0, alias="RESPONSES_CONVERSATION_CACHE_MB")
    # Likewise the branches of the chains (previous_response_id) a worker served.
    chain_cache_mb: float = Field(32.0, ge=0, alias="RESPONSES_CHAIN_CACHE_MB")
    # On SIGTERM a worker takes no new job and lets running generations finish this long; the
    # ones still running then end `failed`. Queued responses stay queued for the next worker.
    shutdown_grace_seconds: int = Field(25, alias="RESPONSES_SHUTDOWN_GRACE_SECONDS")
    # How often each worker and API process reaps expired leases (and each worker requeues
    # responses Redis lost), and how old a queued response must be before it counts as lost.
    housekeeping_seconds: float = Field(5.0, alias="RESPONSES_HOUSEKEEPING_SECONDS")
    requeue_after_seconds: float = Field(10.0, alias="RESPONSES_REQUEUE_AFTER_SECONDS")
    # Retention (a periodic job in every worker): stored responses live this many days; background
    # store=false ones this long after they end (their polling window); a background stream's
    # event log this many hours after it ends (then it can no longer be streamed back). The event
    # log of a foreground response, which nothing can replay, goes a minute after it ends.
    retention_days: float = Field(30.0, alias="RESPONSES_RETENTION_DAYS")
    unstored_background_seconds: float = Field(600.0, alias="RESPONSES_UNSTORED_BACKGROUND_SECONDS")
    stream_log_hours: float = Field(24.0, alias="RESPONSES_STREAM_LOG_HOURS")
    retention_interval_seconds: float = Field(60.0, alias="RESPONSES_RETENTION_INTERVAL_SECONDS")
    # How often each worker vacuums the event log's live partition (app/housekeeping/live_log.py).
    live_log_vacuum_seconds: float = Field(2.0, gt=0, alias="RESPONSES_LIVE_LOG_VACUUM_SECONDS")
    # The operator's console (/console, app/console/): off unless set; its sessions last this long.
    console: bool = Field(False, alias="RESPONSES_CONSOLE")
    console_session_hours: float = Field(12.0, gt=0, alias="RESPONSES_CONSOLE_SESSION_HOURS")
    runtime_connect_timeout: float = Field(10.0, alias="RESPONSES_RUNTIME_CONNECT_TIMEOUT")
    runtime_read_timeout: float = Field(600.0, alias="RESPONSES_RUNTIME_READ_TIMEOUT")


def _hosts_as_parameters(rest: str) -> str:
    """libpq's list of servers (`user@host1:5432,host2:5432/db`, tried in turn, as with
    `target_session_attrs=read-write` for a failover pair) in the form SQLAlchemy hands asyncpg:
    one `host` parameter each (`user@/db?host=host1:5432&host=host2:5432`)."""
    parts = urlsplit(f"x://{rest}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return rest
    listed = "&".join(f"host={host}" for host in hosts.split(","))
    query = f"{parts.query}&{listed}" if parts.query else listed
    return urlunsplit(("x", f"{userinfo}{at}", parts.path, query, parts.fragment)).removeprefix("x://")

"""The schema. Postgres is the source of truth (design invariant 1); Redis holds only signals.

Written to be read from psql by an operator: every table and column carries a comment, status
values are a CHECK, and views summarise (`response_overview`, `queue_health`,
`usage_by_account_day`, `failures_by_code`: migrations 0001 and 0010, docs/operating.md).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB, REAL, TSVECTOR

from app.protocol.file_upload import FILE_PURPOSES
from app.protocol.vocabulary import STATUSES

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _now() -> Column[object]:
    return Column(
        "created_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=func.now(),
        comment="when the row was created",
    )


accounts = Table(
    "accounts",
    metadata,
    Column("id", Text, primary_key=True, comment="acct_… id"),
    Column("name", Text, nullable=False, unique=True, comment="operator-chosen account name"),
    _now(),
    Column("disabled_at", DateTime(timezone=True), comment="set by `accounts disable`: its keys are refused"),
    Column("requests_per_minute", Integer, comment="creates admitted per minute (`limits set`); null: no limit"),
    Column("tokens_per_minute", Integer, comment="tokens admitted per minute, estimated then settled; null: no limit"),
    Column(
        "max_concurrent", Integer, comment="stored or background responses queued or running at once; null: no limit"
    ),
    comment="Tenants. Every response belongs to one; accounts never see each other's data.",
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Text, primary_key=True, comment="key_… id"),
    Column("account_id", Text, ForeignKey("accounts.id", ondelete="CASCADE"), nullable=False, index=True),
    Column(
        "key_hash", Text, nullable=False, unique=True, comment="hex SHA-256 of the key; the key itself is never stored"
    ),
    Column("display_prefix", Text, nullable=False, comment="first characters of the key, to tell keys apart"),
    _now(),
    Column("last_used_at", DateTime(timezone=True), comment="updated at most once a minute"),
    Column("revoked_at", DateTime(timezone=True), comment="set by `keys revoke`; a revoked key is refused"),
    comment="Bearer keys of accounts, stored as hashes.",
)


responses = Table(
    "responses",
    metadata,
    Column("id", Text, primary_key=True, comment="resp_… id"),
    Column("account_id", Text, ForeignKey("accounts.id", ondelete="CASCADE"), nullable=False),
    Column("model", Text, nullable=False, comment="catalog id of the model"),
    Column(
        "status",
        Text,
        nullable=False,
        server_default="queued",
        comment="queued → in_progress → completed|incomplete|failed|cancelled; terminal never changes",
    ),
    Column("background", Boolean, nullable=False, comment="created with background=true"),
    Column("stream", Boolean, nullable=False, comment="created with stream=true"),
    Column("store", Boolean, nullable=False, server_default=text("true"), comment="created with store (default true)"),
    Column("instructions", Text, comment="system instructions of this turn (not inherited by the chain)"),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb"), comment="client metadata"),
    Column(
        "settings",
        JSON,
        nullable=False,
        comment="echoed request settings (temperature, text, tools, …): json, so schemas keep their key order",
    ),
    Column("previous_response_id", Text, comment="as the client sent it; may name a since-deleted response"),
    Column(
        "context_parent_id",
        Text,
        ForeignKey("responses.id", ondelete="SET NULL"),
        comment="the response this one continues, while it exists: its key refuses a continuation of a deleted one",
    ),
    Column("chain_depth", Integer, nullable=False, server_default="0", comment="turns before this one in its chain"),
    Column(
        "context_branches",
        ARRAY(BigInteger),
        nullable=False,
        comment="the branches this response's context runs through, oldest first; the last is its own",
    ),
    Column(
        "context_depths",
        ARRAY(Integer),
        nullable=False,
        comment="for each of context_branches, the deepest turn of it in this context",
    ),
    Column(
        "branch_continued",
        Boolean,
        nullable=False,
        server_default=text("false"),
        comment="a response continued this one on its branch; any other continuation starts a new branch",
    ),
    Column("usage", JSONB, comment="token usage, set when the response ends"),
    Column(
        "rounds_usage",
        JSONB,
        comment="a running tool loop's finished rounds' usage: what a worker continuing it counts on",
    ),
    Column("error", JSONB, comment="{code, message} of a failed response"),
    Column("incomplete_details", JSONB, comment="{reason} of an incomplete response"),
    _now(),
    Column("started_at", DateTime(timezone=True), comment="claimed by a worker"),
    Column("continued_at", DateTime(timezone=True), comment="its last continuation claimed by another worker"),
    Column("completed_at", DateTime(timezone=True), comment="reached a terminal status"),
    Column("events_purged_at", DateTime(timezone=True), comment="when retention removed its event log"),
    Column("cancel_requested_at", DateTime(timezone=True), comment="a cancel (or client disconnect) asked it to stop"),
    Column("worker_id", Text, comment="the worker that claimed it"),
    Column("lease_expires_at", DateTime(timezone=True), comment="the claiming worker's heartbeat deadline"),
    Column(
        "conversation_id",
        Text,
        ForeignKey("conversations.id", ondelete="SET NULL", use_alter=True),
        comment="the conversation it was created in: it reads its items and adds its own when it ends",
    ),
    Column(
        "continuations",
        Integer,
        nullable=False,
        server_default="0",
        comment="times its generation was continued by another worker after its own stopped or died",
    ),
    Column(
        "log_key",
        BigInteger,
        nullable=False,
        unique=True,
        # while it runs, a key of the live partition; once it ended, the day it ended in the
        # upper 32 bits and a counter in the lower ones (migrations 0015, 0021): one day's keys
        # are one range
        server_default=text("new_log_key()"),
        comment="the key of its event log (event_log): while it runs, one of event_log_live; "
        "once it ended, the day it ended in the upper 32 bits",
    ),
    CheckConstraint(f"status IN ({', '.join(repr(s) for s in STATUSES)})", name="status"),
    Index(None, "account_id", "created_at"),
    # The console's lists, newest first (migration 0020): every account's, a model's, a rare
    # status's (the active ones: ix_responses_active), those with a metadata pair.
    Index("ix_responses_recent", "created_at", "id"),
    Index("ix_responses_model_recent", "model", "created_at", "id"),
    Index(
        "ix_responses_rare_status",
        "status",
        "created_at",
        "id",
        postgresql_where=text("status IN ('failed', 'cancelled', 'incomplete')"),
    ),
    Index(
        "ix_responses_metadata",
        "metadata",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
        postgresql_where=text("metadata <> '{}'::jsonb"),
    ),
    Index(None, "context_parent_id"),
    # Retention's, one per kind of expiry (app/housekeeping/retention.py), each in the order things come due.
    Index("ix_responses_stored_expiry", "created_at", postgresql_where=text("store AND conversation_id IS NULL")),
    Index(None, "conversation_id", postgresql_where=text("conversation_id IS NOT NULL")),
    Index("ix_responses_unstored_expiry", "completed_at", postgresql_where=text("NOT store")),
    Index(
        "ix_responses_stream_log_expiry",
        "completed_at",
        postgresql_where=text("events_purged_at IS NULL AND background"),
    ),
    Index(
        "ix_responses_foreground_log_expiry",
        "completed_at",
        postgresql_where=text("events_purged_at IS NULL AND NOT background"),
    ),
    # The failures_by_code view's (migration 0010): failures are few, so this stays small.
    Index("ix_responses_failed", "completed_at", postgresql_where=text("status = 'failed'")),
    # The accounts' concurrency limit counts their active responses (app/service/admission.py).
    Index("ix_responses_active_by_account", "account_id", postgresql_where=text("status IN ('queued', 'in_progress')")),
    Index(
        "ix_responses_active",
        "status",
        "lease_expires_at",
        postgresql_where=text("status IN ('queued', 'in_progress')"),
    ),
    comment="One row per stored (or background) response. Its items and events hang off it.",
    # Room on each page for in-place (HOT) updates: a lease renewed, a claim, an end.
    postgresql_with={"fillfactor": "70"},
)

items = Table(
    "items",
    metadata,
    Column("id", Text, primary_key=True, comment="msg_…/fc_…/rs_… id, assigned by the server"),
    Column("response_id", Text, ForeignKey("responses.id", ondelete="CASCADE"), nullable=False),
    Column("side", Text, nullable=False, comment="input: sent by the client; output: generated"),
    Column("position", Integer, nullable=False, comment="order within the response's side"),
    Column("type", Text, nullable=False, comment="message, function_call, …"),
    Column(
        "payload",
        JSON,
        nullable=False,
        comment="the item as the API shows it, without its id: json, read back as the text it was written",
    ),
    Column("branch_id", BigInteger, nullable=False, comment="its response's branch (the last of context_branches)"),
    Column("depth", Integer, nullable=False, comment="its response's chain_depth"),
    CheckConstraint("side IN ('input', 'output')", name="side"),
    UniqueConstraint("response_id", "side", "position"),
    # A context is one range of this index per branch it runs through, in the order the model reads it.
    Index(None, "branch_id", "depth", "side", "position"),
    comment="Every input and output item, stored once under the response that introduced it.",
)

# The event log, compact: a response's integer key (no text id, no foreign key: their index
# entries and locks cost every token), and a delta's row holds only the delta, the rest of the
# event once per part in `event_templates` (app/storage/event_templates.py); once the response
# ended, each run of its deltas is one row. Read it through the `response_events` view below,
# which puts every event back as it was streamed.
event_log = Table(
    "event_log",
    metadata,
    Column("log_key", BigInteger, nullable=False, comment="responses.log_key of its response"),
    Column(
        "sequence_number", Integer, nullable=False, comment="0, 1, 2, … per response, no gaps (a run: its last delta's)"
    ),
    Column(
        "template",
        Integer,
        comment="a delta: event_templates.id, payload is only the delta's JSON; null: payload is the whole event",
    ),
    Column(
        "run_length",
        Integer,
        comment="a run of that many consecutive deltas of its template, folded when its response ended: "
        "payload is the JSON array of their texts; null: one event",
    ),
    Column(
        "output_at",
        Integer,
        comment="where in payload a piece of the response's output items was left out (characters); null: none",
    ),
    Column("type", Text, comment="SSE event type, e.g. response.created (null: the template's)"),
    Column(
        "payload",
        Text,
        nullable=False,
        comment="the event as sent, sequence_number included, never parsed here (a delta: its JSON string only; "
        "a closing event of a large answer: without its piece of the output)",
    ),
    Column(
        "output_path",
        ARRAY(Text),
        comment="which piece: its path in the output items ({} all, {2} item 2, {2,content,0,text} its text)",
    ),
    Column(
        "committed_at",
        DateTime(timezone=True),
        comment="when a whole event was committed (a response's timeline); null for deltas and runs",
    ),
    PrimaryKeyConstraint("log_key", "sequence_number"),
    comment="The durable, replayable stream of each response (read it through the response_events view): "
    "a running response's in event_log_live, an ended one's in the partition of the day it ended "
    "(event_log_YYYY_MM_DD).",
    # a partition a day of log_key >> 32, and the live one (migrations 0015, 0021,
    # app/housekeeping/log_partitions.py, live_log.py)
    postgresql_partition_by="RANGE (log_key)",
)

event_templates = Table(
    "event_templates",
    metadata,
    Column("log_key", BigInteger, nullable=False),
    Column(
        "id",
        Integer,
        nullable=False,
        comment="from the delta type and its output and content indexes (app/storage/event_templates.py)",
    ),
    Column("type", Text, nullable=False, comment="SSE event type of its deltas"),
    Column("prefix", Text, nullable=False, comment="the event's JSON before the delta's value"),
    Column(
        "suffix", Text, nullable=False, comment="the event's JSON after the delta's value, without its closing brace"
    ),
    PrimaryKeyConstraint("log_key", "id"),
    comment="What the deltas of one part of a response share: the event without its delta, once.",
)

# Views (created by migrations, not by this metadata): described here to be queried.
views = MetaData()

response_events = Table(
    "response_events",
    views,
    Column("response_id", Text),
    Column("sequence_number", Integer),
    Column("type", Text),
    Column("payload", Text),
    Column("output_at", Integer),
    Column("output_path", ARRAY(Text)),
    Column("log_key", BigInteger),
    comment="Every stored event as it was streamed (event_log with its templates and left-out output put back).",
)

output_snapshots = Table(
    "output_snapshots",
    metadata,
    Column("response_id", Text, ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True),
    Column("sequence_number", Integer, nullable=False, comment="the last event folded into output"),
    Column("output", JSON, nullable=False, comment="the response's output items after that event"),
    comment="The output so far of a running response, saved by a poll so that the next one folds only "
    "the events after it. Removed with the event log.",
)

# Numbers the branches of chains (docs/architecture.md, "Chains").
branch_ids = Sequence("branch_ids", metadata=metadata)
response_log_keys = Sequence("response_log_keys", metadata=metadata)

conversations = Table(
    "conversations",
    metadata,
    Column("id", Text, primary_key=True, comment="conv_… id"),
    Column(
        "account_id",
        Text,
        ForeignKey("accounts.id", ondelete="CASCADE"),
        nullable=False,
        comment="the account it belongs to: no other sees it",
    ),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb"), comment="the client's, 16 pairs"),
    _now(),
    Column(
        "active_response_id",
        Text,
        ForeignKey("responses.id", ondelete="SET NULL", use_alter=True),
        comment="the response running on it, if any: another is refused (conversation_locked) until it ends",
    ),
    Column(
        "items_removed",
        BigInteger,
        nullable=False,
        server_default=text("0"),
        comment="counts removals of its items: a worker's copy of them is whole but for later items while unchanged",
    ),
    Index(None, "account_id", "created_at"),
    Index(None, "active_response_id", postgresql_where=text("active_response_id IS NOT NULL")),
    comment="OpenAI's conversations: an ordered list of items that responses read and add to.",
)

# Orders the batches of items joining conversations (a response's end, a create of items).
conversation_item_batches = Sequence("conversation_item_batches", metadata=metadata)

conversation_items = Table(
    "conversation_items",
    metadata,
    Column("conversation_id", Text, ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False),
    Column("batch", BigInteger, nullable=False, comment="the batch it joined in (a response's end, a create)"),
    Column("place", Integer, nullable=False, comment="its place in that batch"),
    Column("item_id", Text, nullable=False, comment="the item's id, as the API shows it"),
    Column(
        "item_ref",
        Text,
        ForeignKey("items.id", ondelete="CASCADE"),
        index=True,
        comment="the row in items that holds it, for an item a response holds",
    ),
    Column("type", Text, comment="message, function_call, …: for an item created in the conversation"),
    Column("payload", JSON, comment="the item without its id: for an item created in the conversation"),
    PrimaryKeyConstraint("conversation_id", "batch", "place"),
    UniqueConstraint("conversation_id", "item_id"),
    CheckConstraint("(item_ref IS NULL) = (payload IS NOT NULL)", name="held_once"),
    comment="The items of each conversation in order: references to items its responses hold, or items of its own.",
)

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", Text, primary_key=True, comment="we_… id"),
    Column(
        "account_id",
        Text,
        ForeignKey("accounts.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
        comment="whose responses it hears of",
    ),
    Column("url", Text, nullable=False, comment="where deliveries are POSTed (through the egress guard)"),
    Column("events", ARRAY(Text), nullable=False, comment="the event types it is sent: response.completed, …"),
    Column("secret", Text, nullable=False, comment="whsec_…: signs its deliveries (Standard Webhooks)"),
    Column(
        "previous_secret",
        Text,
        comment="the secret before the last rotation: deliveries carry a signature by each for a day after it",
    ),
    Column("rotated_at", DateTime(timezone=True), comment="when the secret was last rotated"),
    _now(),
    comment="Where an account's webhooks go: `responses-server webhooks add|list|remove|rotate`.",
)

PENDING = "delivered_at IS NULL AND failed_at IS NULL"

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Text, primary_key=True, comment="evt_…: the event's id and its webhook-id on every attempt"),
    Column("endpoint_id", Text, ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False, index=True),
    Column(
        "response_id",
        Text,
        nullable=False,
        comment="the response whose end it tells (no foreign key: deleting it does not take back what it announced)",
    ),
    Column("type", Text, nullable=False, comment="response.completed, response.failed, …"),
    Column("payload", Text, nullable=False, comment="the body, as signed and sent on every attempt"),
    _now(),
    Column("attempts", Integer, nullable=False, server_default=text("0"), comment="attempts begun"),
    Column(
        "next_attempt_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=func.now(),
        comment="when it is due; while an attempt runs, when that attempt counts as lost",
    ),
    Column("delivered_at", DateTime(timezone=True), comment="when its endpoint answered 2xx"),
    Column("failed_at", DateTime(timezone=True), comment="when it was given up (72 hours of attempts)"),
    Column("last_status", Integer, comment="the HTTP status of its last attempt, if one came"),
    Column("last_error", Text, comment="why its last attempt failed"),
    CheckConstraint("delivered_at IS NULL OR failed_at IS NULL", name="ended_once"),
    Index("ix_webhook_deliveries_due", "next_attempt_at", postgresql_where=text(PENDING)),
    Index("ix_webhook_deliveries_pending_since", "created_at", postgresql_where=text(PENDING)),
    Index("ix_webhook_deliveries_done_expiry", "created_at", postgresql_where=text(f"NOT ({PENDING})")),
    comment="The webhook outbox: one row per event and endpoint, written with the response's end.",
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("account_id", Text, ForeignKey("accounts.id", ondelete="CASCADE"), nullable=False),
    Column("key", Text, nullable=False, comment="the client's Idempotency-Key"),
    Column("fingerprint", Text, nullable=False, comment="SHA-256 of the request: its route and body"),
    Column(
        "resource_id",
        Text,
        comment="what the first request created (a response, a conversation); null while it is being created",
    ),
    Column("item_ids", ARRAY(Text), comment="the items it created, for an items create"),
    _now(),
    PrimaryKeyConstraint("account_id", "key"),
    Index("ix_idempotency_keys_expiry", "created_at"),
    comment="Idempotency-Key: a create sent again within 24 hours answers with what the first created.",
)

operator_keys = Table(
    "operator_keys",
    metadata,
    Column("id", Text, primary_key=True, comment="opk_… id"),
    Column("name", Text, nullable=False, comment="who holds it, as the operator named it"),
    Column("key_hash", Text, nullable=False, unique=True, comment="hex SHA-256 of the key; never the key itself"),
    Column("display_prefix", Text, nullable=False, comment="first characters of the key"),
    _now(),
    Column("last_used_at", DateTime(timezone=True), comment="its last console login"),
    Column("revoked_at", DateTime(timezone=True), comment="set by `operators revoke`: refused, sessions ended"),
    Index("ix_operator_keys_live_name", "name", unique=True, postgresql_where=text("revoked_at IS NULL")),
    comment="Keys of the console's operators: they see every account's responses. Stored as hashes.",
)

console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id", Text, primary_key=True, comment="hex SHA-256 of the session cookie"),
    Column(
        "operator_key_id",
        Text,
        ForeignKey("operator_keys.id", ondelete="CASCADE"),
        nullable=False,
        comment="the key it logged in with",
    ),
    Column("csrf_token", Text, nullable=False, comment="what every form of the session must carry"),
    _now(),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("ix_console_sessions_operator", "operator_key_id"),
    comment="The console's browser sessions; a logout or an expiry ends one.",
)

response_steers = Table(
    "response_steers",
    metadata,
    Column("id", Text, primary_key=True, comment="steer_… id"),
    Column(
        "response_id",
        Text,
        ForeignKey("responses.id", ondelete="CASCADE"),
        nullable=False,
        comment="the running response it steers",
    ),
    Column("input", JSONB, nullable=False, comment="its input: user messages, as items"),
    Column("successor_id", Text, comment="the response created with this input (null while it waits for one)"),
    _now(),
    Index("ix_response_steers_response", "response_id"),
    comment="WebSocket steering: input queued for a running response's successor, stored before it is acknowledged.",
)


files = Table(
    "files",
    metadata,
    Column("id", Text, primary_key=True, comment="file-… id"),
    Column(
        "account_id",
        Text,
        ForeignKey("accounts.id", ondelete="CASCADE"),
        nullable=False,
        comment="the account it belongs to: no other sees it",
    ),
    Column("filename", Text, nullable=False, comment="as uploaded"),
    Column("purpose", Text, nullable=False, comment="as uploaded: assistants, user_data, batch, …"),
    Column("bytes", BigInteger, nullable=False, comment="its size"),
    Column("sha256", Text, nullable=False, comment="hex SHA-256 of its bytes"),
    Column("content_type", Text, comment="the media type its upload declared, if any"),
    _now(),
    Column("expires_at", DateTime(timezone=True), comment="when retention removes it (expires_after); null: never"),
    CheckConstraint("purpose IN (" + ", ".join(f"'{p}'" for p in FILE_PURPOSES) + ")", name="purpose"),
    Index(None, "account_id", "created_at", "id"),
    Index("ix_files_expiry", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    comment="Files API: uploaded files; their bytes are in file_pieces.",
)

FILE_PIECE_BYTES = 1024 * 1024  # what one row of file_pieces holds (the last of a file may hold less)

file_pieces = Table(
    "file_pieces",
    metadata,
    Column(
        "file_id",
        Text,
        ForeignKey("files.id", ondelete="CASCADE", deferrable=True, initially="DEFERRED"),
        nullable=False,
        comment="the file (written before its row, in the upload's transaction: the key is checked at commit)",
    ),
    Column("seq", Integer, nullable=False, comment="its place in the file, from 0"),
    Column("data", LargeBinary, nullable=False, comment="up to 1 MiB of the file's bytes (stored uncompressed)"),
    PrimaryKeyConstraint("file_id", "seq"),
    comment="The bytes of each file, in pieces of 1 MiB, streamed in and out.",
)


VECTOR_STORE_FILE_STATUSES = ("in_progress", "completed", "cancelled", "failed")

vector_stores = Table(
    "vector_stores",
    metadata,
    Column("id", Text, primary_key=True, comment="vs_… id"),
    Column(
        "account_id",
        Text,
        ForeignKey("accounts.id", ondelete="CASCADE"),
        nullable=False,
        comment="the account it belongs to: no other sees it",
    ),
    Column("name", Text, comment="the client's"),
    Column("description", Text, comment="the client's"),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb"), comment="the client's, 16 pairs"),
    Column("embedding_model", Text, nullable=False, comment="the catalog embedding model its chunks are embedded by"),
    Column("embedding_dimensions", Integer, nullable=False, comment="the length of that model's vectors"),
    Column(
        "chunking",
        JSONB,
        nullable=False,
        comment="its files' default chunking: {max_chunk_size_tokens, chunk_overlap_tokens}",
    ),
    Column("expires_after_days", Integer, comment="expires_after: days after it was last active; null: never"),
    Column(
        "last_active_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=func.now(),
        comment="its last create, change or search",
    ),
    Column("expires_at", DateTime(timezone=True), comment="last_active_at + expires_after_days, kept with it"),
    _now(),
    Index(None, "account_id", "created_at", "id"),
    Index("ix_vector_stores_expiry", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    comment="Vector stores: files chunked and embedded for search; their chunks are in chunks.",
)

vector_store_file_batches = Table(
    "vector_store_file_batches",
    metadata,
    Column("id", Text, primary_key=True, comment="vsfb_… id"),
    Column("vector_store_id", Text, ForeignKey("vector_stores.id", ondelete="CASCADE"), nullable=False, index=True),
    _now(),
    Column(
        "cancelled_at",
        DateTime(timezone=True),
        comment="when it was cancelled: its files not yet ingested were cancelled",
    ),
    comment="File batches: files attached to a vector store together; their status is their files'.",
)

vector_store_files = Table(
    "vector_store_files",
    metadata,
    Column("vector_store_id", Text, ForeignKey("vector_stores.id", ondelete="CASCADE"), nullable=False),
    Column(
        "file_id",
        Text,
        ForeignKey("files.id", ondelete="CASCADE"),
        nullable=False,
        comment="the file (deleting it detaches it from every vector store)",
    ),
    Column(
        "status",
        Text,
        nullable=False,
        server_default=text("'in_progress'"),
        comment="in_progress, completed, cancelled, failed",
    ),
    Column("last_error", JSONB, comment="why it failed: {code: server_error|unsupported_file|invalid_file, message}"),
    Column(
        "attributes", JSONB, nullable=False, server_default=text("'{}'::jsonb"), comment="the client's, for filters"
    ),
    Column("chunking", JSONB, nullable=False, comment="{max_chunk_size_tokens, chunk_overlap_tokens}"),
    Column(
        "usage_bytes", BigInteger, nullable=False, server_default=text("0"), comment="the bytes of its chunks' text"
    ),
    Column(
        "batch_id",
        Text,
        ForeignKey("vector_store_file_batches.id", ondelete="SET NULL"),
        index=True,
        comment="the file batch it was attached in, if any",
    ),
    Column("lease_until", DateTime(timezone=True), comment="while a worker ingests it: when its claim lapses"),
    Column("attempts", Integer, nullable=False, server_default=text("0"), comment="ingestions begun"),
    _now(),
    PrimaryKeyConstraint("vector_store_id", "file_id"),
    CheckConstraint("status IN (" + ", ".join(f"'{s}'" for s in VECTOR_STORE_FILE_STATUSES) + ")", name="status"),
    Index(None, "vector_store_id", "created_at", "file_id"),
    Index("ix_vector_store_files_ingesting", "created_at", postgresql_where=text("status = 'in_progress'")),
    Index(None, "file_id"),
    comment="The files attached to each vector store and their ingestion.",
)

chunks = Table(
    "chunks",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("vector_store_id", Text, nullable=False),
    Column("file_id", Text, nullable=False),
    Column("seq", Integer, nullable=False, comment="its place in its file, from 0"),
    Column("text", Text, nullable=False),
    Column("tokens", Integer, nullable=False, comment="its length, as the chunker counts tokens"),
    Column("dimensions", Integer, nullable=False, comment="its embedding's length: which vector index holds it"),
    Column("embedding", ARRAY(REAL), nullable=False, comment="its vector (cast to pgvector's vector by the search)"),
    Column(
        "search",
        TSVECTOR,
        Computed("to_tsvector('english', text)", persisted=True),
        comment="its words for full-text search",
    ),
    ForeignKeyConstraint(
        ["vector_store_id", "file_id"],
        ["vector_store_files.vector_store_id", "vector_store_files.file_id"],
        ondelete="CASCADE",
    ),
    UniqueConstraint("vector_store_id", "file_id", "seq"),
    Index("ix_chunks_search", "search", postgresql_using="gin"),
    comment="Every vector store's chunks, in one table; a vector index per embedding length is made where pgvector is.",
)


# The views are created by migrations 0001 and 0010 (views are not metadata objects).


def described_here(obj: object, name: str | None, kind: str, reflected: bool, compare_to: object) -> bool:
    """For alembic's comparison: every table and index but the event log's day partitions, which
    app/housekeeping/log_partitions.py makes and drops (migration 0015), and the chunks' vector
    indexes, made per embedding length where pgvector is (app/storage/vector_index.py)."""
    name = name or ""
    made_at_run_time = (kind == "table" and name.startswith("event_log_")) or (
        kind == "index" and name.startswith("ix_chunks_embedding_")
    )
    return not (reflected and compare_to is None and made_at_run_time)

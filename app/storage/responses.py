"""Queries on the `responses` table. Status changes are compare-and-set (design invariant 3):
an UPDATE that names the statuses it may leave, so racing writers have exactly one winner.

Every function takes the caller's connection and never commits: the caller owns the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any

import orjson
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.protocol.encoding import WireEvent
from app.protocol.input_items import CLIENT_CALL_TYPES
from app.protocol.response_object import ResponseRecord
from app.protocol.vocabulary import ACTIVE_STATUSES, Status
from app.storage import DbRow, output_refs
from app.storage import conversations as conversations_db
from app.storage import items as items_db
from app.storage.driver import DriverStatement, as_columns, refused_data
from app.storage.tables import responses


@dataclass(frozen=True, slots=True)
class ChainLink:
    """Where a new response attaches to its chain."""

    parent_id: str | None
    depth: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a generation ended: what `finish` writes."""

    status: Status
    output: list[dict[str, Any]]
    completed_at: float
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None

    def applied_to(self, record: ResponseRecord) -> ResponseRecord:
        """The response as this outcome leaves it (what its terminal event carries)."""
        return record.evolve(
            status=self.status,
            output=self.output,
            usage=self.usage,
            error=self.error,
            incomplete_details=self.incomplete_details,
            completed_at=self.completed_at,
        )


def db_now(offset_seconds: float = 0.0) -> Any:
    """Postgres's clock (plus an offset): leases and ages are judged by one clock, not each host's."""
    return func.now() + timedelta(seconds=offset_seconds)


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


_JSON_COLUMNS = ("settings", "metadata", "usage", "error", "incomplete_details")
_RECORD_COLUMNS = (
    "id",
    "model",
    "status",
    "created_at",
    "instructions",
    "previous_response_id",
    "store",
    "background",
    "stream",
    "completed_at",
    "events_purged_at",
    *_JSON_COLUMNS,
)


def record_from_row(row: DbRow | Mapping[str, Any], output: list[dict[str, Any]]) -> ResponseRecord:
    """From a `responses` row, or a mapping of (at least) its _RECORD_COLUMNS."""
    columns = row if isinstance(row, Mapping) else row._mapping
    return ResponseRecord(
        id=columns["id"],
        model=columns["model"],
        status=columns["status"],
        created_at=columns["created_at"].timestamp(),
        instructions=columns["instructions"],
        previous_response_id=columns["previous_response_id"],
        settings=columns["settings"],
        metadata=columns["metadata"],
        store=columns["store"],
        background=columns["background"],
        stream=columns["stream"],
        completed_at=_epoch(columns["completed_at"]),
        error=columns["error"],
        incomplete_details=columns["incomplete_details"],
        usage=columns["usage"],
        output=output,
        events_purged=columns["events_purged_at"] is not None,
    )


# UNFLUSHED_COMMITS: a statement whose effect no client can see before a later commit of the same
# response does not wait for its commit's WAL flush (`SET LOCAL synchronous_commit = off`, for
# its own transaction only): a response's claim, and a foreground response's insert (its client
# learns of it from its first event). The WAL is one sequence, so the flush of that first event's
# commit, which does wait, makes them durable too. Should Postgres stop before then, it comes back
# without them, as if the create (or the claim) had not yet happened: a claim lost is taken again
# (a worker whose claim was lost has its events refused, as a reaped one's), an insert lost was
# never answered. A background response's insert is answered at once, so its commit waits.
# Each saves a WAL flush on the way to the first token (docs/benchmark.md).

# Built once: statements built per call spend more CPU on SQLAlchemy's cache keys than on Postgres.
# Responses and their input items go in with one statement, for any number of responses: atomic
# without a transaction around it. Each takes its place in its chain (docs/architecture.md,
# "Chains"): the first continuation of a response goes on its branch, any other (and a chain's
# first turn) starts a branch. The compare-and-set on branch_continued makes that first one one.
# Its commit waits for the WAL's flush only when a background response is in it (`flush`); see
# UNFLUSHED_COMMITS.
# A response stored already is left as it is (a foreground one's worker and its API may both store
# it: app/service/enqueueing.py); the statement answers with those it stored.
_INPUT_ITEMS = """
    input AS (
        INSERT INTO items (id, response_id, side, position, type, payload, branch_id, depth)
        SELECT i.id, response.id, 'input', i.position, i.type, i.payload, response.branch_id, response.chain_depth
        FROM unnest(CAST(:item_ids AS text[]), CAST(:item_responses AS text[]), CAST(:positions AS int[]),
                    CAST(:types AS text[]), CAST(:payloads AS json[])) AS i(id, response_id, position, type, payload)
        JOIN response ON response.id = i.response_id
    )
    SELECT id FROM response
"""
_INSERT_WITH_INPUT = DriverStatement(
    text(
        """
    WITH flush AS (
        SELECT set_config('synchronous_commit', CASE WHEN :flush THEN 'on' ELSE 'off' END, true)
    ), new AS (
        SELECT r.* FROM flush, unnest(CAST(:ids AS text[]), CAST(:account_ids AS text[]), CAST(:models AS text[]),
                             CAST(:statuses AS text[]), CAST(:backgrounds AS boolean[]), CAST(:streams AS boolean[]),
                             CAST(:stores AS boolean[]), CAST(:instructions AS text[]), CAST(:metadata AS jsonb[]),
                             CAST(:settings AS json[]), CAST(:previous_response_ids AS text[]),
                             CAST(:context_parent_ids AS text[]), CAST(:chain_depths AS int[]),
                             CAST(:created_epochs AS float8[]), CAST(:conversation_ids AS text[]))
            AS r(id, account_id, model, status, background, stream, store, instructions, metadata, settings,
                 previous_response_id, context_parent_id, chain_depth, created_epoch, conversation_id)
    ), continuing AS (
        UPDATE responses p SET branch_continued = true
        FROM (SELECT DISTINCT ON (context_parent_id) id, context_parent_id FROM new
              WHERE context_parent_id IS NOT NULL ORDER BY context_parent_id, id) c
        WHERE p.id = c.context_parent_id AND NOT p.branch_continued
        RETURNING c.id
    ), response AS (
        INSERT INTO responses (id, account_id, model, status, background, stream, store, instructions, metadata,
                               settings, previous_response_id, context_parent_id, chain_depth, created_at,
                               conversation_id, context_branches, context_depths)
        SELECT r.id, r.account_id, r.model, r.status, r.background, r.stream, r.store, r.instructions, r.metadata,
               r.settings, r.previous_response_id, r.context_parent_id, r.chain_depth, to_timestamp(r.created_epoch),
               r.conversation_id,
               CASE WHEN c.id IS NULL THEN coalesce(p.context_branches, '{}') || nextval('branch_ids')
                    ELSE p.context_branches END,
               coalesce(CASE WHEN c.id IS NULL THEN p.context_depths
                             ELSE p.context_depths[1:cardinality(p.context_depths) - 1] END, '{}') || r.chain_depth
        FROM new r LEFT JOIN continuing c ON c.id = r.id LEFT JOIN responses p ON p.id = r.context_parent_id
        ON CONFLICT (id) DO NOTHING
        RETURNING id, context_branches[cardinality(context_branches)] AS branch_id, chain_depth, log_key
    ), opening AS (
        INSERT INTO event_log (log_key, sequence_number, type, payload, output_at, output_path, committed_at)
        SELECT response.log_key, e.sequence_number, e.type, e.payload, e.output_at,
               string_to_array(e.output_path, ','), now()
        FROM unnest(CAST(:event_responses AS text[]), CAST(:event_numbers AS int[]), CAST(:event_types AS text[]),
                    CAST(:event_payloads AS text[]), CAST(:event_output_ats AS int[]),
                    CAST(:event_output_paths AS text[]))
            AS e(response_id, sequence_number, type, payload, output_at, output_path)
        JOIN response ON response.id = e.response_id
    ),"""
        + _INPUT_ITEMS
    )
)
# A foreground response its worker stores as it claims it (app/service/enqueueing.py): it continues
# nothing, has no conversation and no opening events, so it takes a branch of its own at depth 0
# and none of the chain's work above; stored `in_progress`, leased to its worker: the primary key
# is the claim's compare-and-set. Its commit does not wait for the WAL's flush (UNFLUSHED_COMMITS).
_INSERT_CLAIMED = DriverStatement(
    text(
        """
    WITH response AS (
        INSERT INTO responses (id, account_id, model, status, background, stream, store, instructions, metadata,
                               settings, chain_depth, created_at, context_branches, context_depths, worker_id,
                               started_at, lease_expires_at)
        SELECT r.id, r.account_id, r.model, 'in_progress', false, r.stream, true, r.instructions, r.metadata,
               r.settings, 0, to_timestamp(r.created_epoch), ARRAY[nextval('branch_ids')], '{0}',
               CAST(:worker_id AS text), now(), now() + make_interval(secs => :lease_seconds)
        FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed,
             unnest(CAST(:ids AS text[]), CAST(:account_ids AS text[]), CAST(:models AS text[]),
                    CAST(:streams AS boolean[]), CAST(:instructions AS text[]), CAST(:metadata AS jsonb[]),
                    CAST(:settings AS json[]), CAST(:created_epochs AS float8[]))
            AS r(id, account_id, model, stream, instructions, metadata, settings, created_epoch)
        ON CONFLICT (id) DO NOTHING
        RETURNING id, context_branches[1] AS branch_id, chain_depth
    ),"""
        + _INPUT_ITEMS
    )
)
# The claims, in one statement for any number of responses; JSON comes back as text, decoded here
# (the statement goes through the driver: app/storage/driver.py).
# A queued response, or a running one whose worker stopped or died and that waits to be continued
# (no worker, no lease): either way one compare-and-set, so a second delivery finds nothing. A
# response that continues nothing (one branch, its own, at depth 0) reads no chain: its context is
# its own input, which the claim brings back with it, so its start costs no second round trip.
# Its commit does not wait for the WAL's flush (UNFLUSHED_COMMITS).
# What a claim takes: a queued response, or a running one left to be continued. The statuses are
# parameters (_CLAIMABLE_STATUSES): with them written out, the held connection's one plan for any
# arrays (app/storage/engine.py) read the partial indexes of active responses whole, every entry
# a response queued or running has had since the last vacuum, rather than the responses by key.
_CLAIMABLE = "(status = :queued OR (status = :in_progress AND worker_id IS NULL))"
_CLAIMABLE_STATUSES = {"queued": "queued", "in_progress": "in_progress"}

# queued → in_progress (or a released one taken up again) for one worker: the compare-and-set of
# invariant 4. Committed without waiting for the WAL's flush, which its first event's commit does.
_CLAIMED = (
    """
    WITH claimed AS (
        UPDATE responses SET status = 'in_progress', started_at = coalesce(started_at, now()),
                             worker_id = :worker_id, lease_expires_at = now() + make_interval(secs => :lease_seconds),
                             continued_at = CASE WHEN status = 'in_progress' THEN now() ELSE continued_at END
        WHERE id = ANY(CAST(:response_ids AS text[])) AND """
    + _CLAIMABLE
    + """
        RETURNING *
    )
    SELECT set_config('synchronous_commit', 'off', true) AS unflushed,"""
)

_CLAIM = DriverStatement(
    text(
        _CLAIMED
        + """ continuations, context_branches, context_depths,
           CASE WHEN cardinality(context_depths) = 1 AND context_depths[1] = 0 THEN
               (SELECT coalesce(json_agg(json_build_array(i.id, i.payload) ORDER BY i.position), '[]')::text
                FROM items i WHERE i.response_id = c.id AND i.side = 'input')
           END AS own_input, """
        + ", ".join(f"{c}::text AS {c}" if c in _JSON_COLUMNS else c for c in _RECORD_COLUMNS)
        + " FROM claimed c"
    )
)

# The claim of responses whose jobs carry their record and their context (their input: they
# continue nothing, app/queue/jobs.py `CarriedResponse`): nothing else is read back. A job may
# come before its response's row is committed, so the claim also says which of those it did not
# take are stored (another worker's, or ended; its snapshot is the update's): one round trip
# tells a row not yet there, to be claimed again, from one that will never be this worker's.
_CLAIM_CARRIED = DriverStatement(
    text(
        _CLAIMED
        + """ id, continuations FROM claimed
    UNION ALL
    SELECT NULL, id, NULL FROM responses
    WHERE id = ANY(CAST(:response_ids AS text[])) AND id NOT IN (SELECT id FROM claimed)"""
    )
)

# Reads the contexts of responses from the spans of their paths (items_db.read_contexts, or a
# worker's copies of the chains it serves).
ContextReader = Callable[[AsyncConnection, Mapping[str, Sequence[items_db.Span]]], Awaitable[dict[str, list[Any]]]]


@dataclass(frozen=True, slots=True)
class Claim:
    record: ResponseRecord
    context: list[dict[str, Any]]  # the chain's inputs and outputs, then the response's own input
    continuations: int = 0  # above 0: a continuation, from the output its log holds


@dataclass(frozen=True, eq=False)  # compared by identity: two alike are still two responses
class NewResponse:
    """A response to store, with its input items (which carry their ids already)."""

    record: ResponseRecord
    account_id: str
    link: ChainLink
    input_items: list[dict[str, Any]]
    # Its first events, numbered from 0 (a background response's `created` and `queued`),
    # stored by the same statement.
    opening: Sequence[WireEvent] = ()

    @property
    def answered_at_once(self) -> bool:
        """Whether its client sees it as soon as it is stored (a background response, answered
        `queued`), rather than from its first event's commit: then its insert must be on disk."""
        return self.record.background


@dataclass(frozen=True, slots=True)
class Claimant:
    """A worker that stores the responses it claims: stored `in_progress`, leased to it."""

    worker_id: str
    lease_seconds: float


# The columns both inserts take of a new response (as `as_columns` makes their parameters).
_NEW_RESPONSE_COLUMNS: dict[str, Callable[[NewResponse], Any]] = {
    "ids": attrgetter("record.id"),
    "account_ids": attrgetter("account_id"),
    "models": attrgetter("record.model"),
    "streams": attrgetter("record.stream"),
    "instructions": attrgetter("record.instructions"),
    "metadata": lambda n: json.dumps(n.record.metadata),
    "settings": lambda n: json.dumps(n.record.settings),
    "created_epochs": attrgetter("record.created_at"),
}


async def insert_responses(conn: AsyncConnection, new: Sequence[NewResponse]) -> set[str]:
    """Stores new responses with their input items and opening events, all with one statement,
    leaving any stored already as it is: the ids of those it stored."""
    opening = [
        (n.record.id, event, stored)
        for n in new
        for event, stored in zip(n.opening, output_refs.numbered_as_stored(n.opening), strict=True)
    ]
    stored = as_columns(
        new,
        **_NEW_RESPONSE_COLUMNS,
        statuses=attrgetter("record.status"),
        backgrounds=attrgetter("record.background"),
        stores=attrgetter("record.store"),
        previous_response_ids=attrgetter("record.previous_response_id"),
        context_parent_ids=attrgetter("link.parent_id"),
        chain_depths=attrgetter("link.depth"),
        conversation_ids=lambda n: (n.record.settings.get("conversation") or {}).get("id"),
    )
    events = as_columns(
        opening,
        event_responses=itemgetter(0),
        event_numbers=lambda one: one[1].sequence_number,
        event_types=lambda one: one[1].type,
        event_payloads=lambda one: one[2].payload,
        event_output_ats=lambda one: one[2].output_at,
        event_output_paths=lambda one: one[2].output_path,
    )
    flush = any(n.answered_at_once for n in new)
    rows = await _INSERT_WITH_INPUT.rows(conn, {**stored, **events, **_input_columns(new), "flush": flush})
    return {row[0] for row in rows}


async def insert_claimed(conn: AsyncConnection, new: Sequence[NewResponse], claimant: Claimant) -> set[str]:
    """Stores foreground responses that start afresh claimed by their worker (`in_progress`,
    leased to it), with their input items, leaving any stored already as it is: the ids of those
    it stored (the others are not this claim's)."""
    for one in new:
        if not _starts_afresh_in_the_foreground(one):
            raise ValueError(f"response {one.record.id} does not start afresh in the foreground")
    stored = as_columns(new, **_NEW_RESPONSE_COLUMNS)
    claimed = {"worker_id": claimant.worker_id, "lease_seconds": claimant.lease_seconds}
    rows = await _INSERT_CLAIMED.rows(conn, {**stored, **_input_columns(new), **claimed})
    return {row[0] for row in rows}


def _starts_afresh_in_the_foreground(new: NewResponse) -> bool:
    """What _INSERT_CLAIMED writes without asking."""
    record = new.record
    return (
        new.link == ChainLink(None, 0)
        and not new.opening
        and record.previous_response_id is None
        and not record.settings.get("conversation")
        and record.store
        and not record.background
    )


def _input_columns(new: Sequence[NewResponse]) -> dict[str, list[Any]]:
    inputs = [(n.record.id, position, item) for n in new for position, item in enumerate(n.input_items)]
    return as_columns(
        inputs,
        item_ids=lambda one: one[2]["id"],
        item_responses=itemgetter(0),
        positions=itemgetter(1),
        types=lambda one: one[2]["type"],
        payloads=lambda one: json.dumps(items_db.stored_payload(one[2])),
    )


async def insert_refusing_alone(
    conn: AsyncConnection, new: Sequence[NewResponse], claimant: Claimant | None = None
) -> dict[NewResponse, bool | Exception]:
    """`insert_responses` (or with a claimant `insert_claimed`) for a batch of callers' responses:
    whether each was stored now (False: it was stored already), or what Postgres refused of it
    alone, so that only its own caller fails."""
    insert = insert_responses if claimant is None else partial(insert_claimed, claimant=claimant)
    try:
        stored = await insert(conn, new)
        return {one: one.record.id in stored for one in new}
    except DBAPIError as exc:
        if len(new) == 1 or not refused_data(exc):
            raise
    outcomes: dict[NewResponse, bool | Exception] = {}
    for one in new:
        try:
            outcomes[one] = bool(await insert(conn, [one]))
        except DBAPIError as exc:
            outcomes[one] = exc
    return outcomes


async def count_active(conn: AsyncConnection, account_id: str) -> int:
    """The account's responses queued or running (ix_responses_active_by_account)."""
    found = await conn.scalar(
        select(func.count()).where(responses.c.account_id == account_id, responses.c.status.in_(ACTIVE_STATUSES))
    )
    return int(found or 0)


async def count_queued(conn: AsyncConnection, model: str) -> int:
    """Responses of this model waiting for a worker (an index range of ix_responses_active)."""
    found = await conn.scalar(select(func.count()).where(responses.c.status == "queued", responses.c.model == model))
    return int(found or 0)


async def get_row(
    conn: AsyncConnection, response_id: str, account_id: str | None = None, *, for_update: bool = False
) -> DbRow | None:
    """The row, or None; scoped to `account_id` when given (the API always gives it)."""
    query = select(responses).where(responses.c.id == response_id)
    if account_id is not None:
        query = query.where(responses.c.account_id == account_id)
    if for_update:
        query = query.with_for_update()
    return (await conn.execute(query)).one_or_none()


async def get_record(
    conn: AsyncConnection,
    response_id: str,
    account_id: str | None = None,
) -> ResponseRecord | None:
    row = await get_row(conn, response_id, account_id)
    if row is None:
        return None
    return record_from_row(row, await items_db.output_items(conn, response_id))


# The previous response a new one would continue (a store=false background response is kept
# only to be polled: it cannot be continued), with the call_ids of the tool calls it ended with
# and the ids of the MCP approvals it asked for. Every continuation reads it: a driver statement.
_CHAIN_LINK = DriverStatement(
    text(f"""
    SELECT r.id, r.chain_depth, r.status,
           (SELECT coalesce(array_agg(i.payload ->> 'call_id'), '{{}}'::text[]) FROM items i
            WHERE i.response_id = r.id AND i.side = 'output'
              AND i.type IN ({", ".join(f"'{kind}'" for kind in CLIENT_CALL_TYPES)})
              AND (i.payload ->> 'execution') IS DISTINCT FROM 'server') AS call_ids,
           (SELECT coalesce(array_agg(i.id), '{{}}'::text[]) FROM items i
            WHERE i.response_id = r.id AND i.side = 'output' AND i.type = 'mcp_approval_request') AS approval_ids
    FROM responses r WHERE r.id = :id AND r.account_id = :account_id AND r.store
""")
)


@dataclass(frozen=True, slots=True)
class Parent:
    id: str
    chain_depth: int
    status: Status
    call_ids: list[str]  # of the tool calls it ended with: the new input must answer them
    approval_ids: list[str]  # of the MCP calls it asked approval for: what the new input may approve


async def chain_link(conn: AsyncConnection, account_id: str, previous_id: str) -> Parent | None:
    """The previous response a new one would continue, if the account may continue it."""
    rows = await _CHAIN_LINK.rows(conn, {"id": previous_id, "account_id": account_id})
    return Parent(*rows[0]) if rows else None


async def claim(conn: AsyncConnection, response_id: str, worker_id: str, lease_seconds: float) -> Claim | None:
    """queued → in_progress for one worker (design invariant 4), with the response's context.
    None: someone else has it, or it ended."""
    return (await claim_many(conn, [response_id], worker_id, lease_seconds)).get(response_id)


async def claim_many(
    conn: AsyncConnection,
    response_ids: Sequence[str],
    worker_id: str,
    lease_seconds: float,
    read_contexts: ContextReader = items_db.read_contexts,
) -> dict[str, Claim]:
    """`claim` for many responses in one statement: those claimed, by id."""
    records, continuations, paths, contexts = [], {}, {}, {}
    for row in await _CLAIM.mappings(conn, _claim_parameters(response_ids, worker_id, lease_seconds)):
        row.update((c, orjson.loads(row[c])) for c in _JSON_COLUMNS if row[c] is not None)
        records.append(record_from_row(row, []))
        continuations[row["id"]] = row["continuations"]
        if row["own_input"] is not None:  # (as branch_tails reads an item: its id last)
            contexts[row["id"]] = [{**payload, "id": item_id} for item_id, payload in orjson.loads(row["own_input"])]
        else:
            paths[row["id"]] = items_db.spans(row["context_branches"], row["context_depths"], own_output=False)
    # The context of a queued response never changes: read after the claim, it is the same.
    if paths:
        contexts |= await read_contexts(conn, paths)
    return {r.id: Claim(r, contexts[r.id], continuations[r.id]) for r in records}


@dataclass(frozen=True, slots=True)
class CarriedClaim:
    """What the claim of a stored response whose job carries it found."""

    continuations: int | None  # claimed, continued that many times before; None: not claimable


async def claim_carried(
    conn: AsyncConnection, response_ids: Sequence[str], worker_id: str, lease_seconds: float
) -> dict[str, CarriedClaim]:
    """`claim_many` for responses whose jobs carry them, by id: those stored, each claimed (with
    its continuations) or not claimable (another worker's, or ended). Those not stored (yet) are
    left out."""
    rows = await _CLAIM_CARRIED.rows(conn, _claim_parameters(response_ids, worker_id, lease_seconds))
    return {response_id: CarriedClaim(continuations) for _, response_id, continuations in rows}


def _claim_parameters(response_ids: Sequence[str], worker_id: str, lease_seconds: float) -> dict[str, Any]:
    claiming = {"response_ids": list(response_ids), "worker_id": worker_id, "lease_seconds": lease_seconds}
    return claiming | _CLAIMABLE_STATUSES


async def release_for_continuation(
    conn: AsyncConnection, response_id: str, max_continuations: int, worker_id: str | None = None
) -> int | None:
    """Leaves a running response to be continued by another worker: no worker, no lease, one more
    continuation; from `worker_id` (a worker handing it over), or, without it, from whichever
    worker let its lease expire (the reaper). None when it is not to be continued: ended,
    someone else's, already released, or continued `max_continuations` times already."""
    owner = responses.c.worker_id == worker_id if worker_id is not None else responses.c.lease_expires_at < db_now()
    released = await conn.scalar(
        update(responses)
        .where(
            responses.c.id == response_id,
            responses.c.status == "in_progress",
            responses.c.cancel_requested_at.is_(None),
            responses.c.continuations < max_continuations,
            owner,
        )
        .values(worker_id=None, lease_expires_at=None, continuations=responses.c.continuations + 1)
        .returning(responses.c.continuations)
    )
    return None if released is None else int(released)


async def awaiting_continuation(conn: AsyncConnection, limit: int = 1000) -> list[tuple[str, str, int]]:
    """Running responses no worker has: (id, model, continuations), to be enqueued again should
    Redis have lost their jobs."""
    rows = await conn.execute(
        select(responses.c.id, responses.c.model, responses.c.continuations)
        .where(responses.c.status == "in_progress", responses.c.lease_expires_at.is_(None))
        .limit(limit)
    )
    return [(r.id, r.model, r.continuations) for r in rows]


async def save_rounds_usage(conn: AsyncConnection, response_id: str, usage: dict[str, Any]) -> None:
    """A running tool loop's usage so far (migration 0017), for a worker that may continue it."""
    await conn.execute(
        update(responses)
        .where(responses.c.id == response_id, responses.c.status == "in_progress")
        .values(rounds_usage=usage)
    )


async def rounds_usage(conn: AsyncConnection, response_id: str) -> dict[str, Any] | None:
    usage: dict[str, Any] | None = await conn.scalar(
        select(responses.c.rounds_usage).where(responses.c.id == response_id)
    )
    return usage


async def request_stop(conn: AsyncConnection, response_id: str) -> None:
    """Flags a running response for its worker, which ends it as cancelled."""
    await conn.execute(
        update(responses)
        .where(responses.c.id == response_id, responses.c.status == "in_progress")
        .values(cancel_requested_at=func.now())
    )


async def renew_leases(
    conn: AsyncConnection,
    response_ids: Collection[str],
    worker_id: str,
    lease_seconds: float,
) -> list[str]:
    """Extends the leases of the responses this worker runs; returns those it must stop: their
    cancel was requested, or they are no longer its to run (ended elsewhere, deleted)."""
    rows = await conn.execute(
        update(responses)
        .where(
            responses.c.id.in_(list(response_ids)),
            responses.c.status == "in_progress",
            responses.c.worker_id == worker_id,
        )
        .values(lease_expires_at=db_now(lease_seconds))
        .returning(responses.c.id, responses.c.cancel_requested_at)
    )
    renewed = {r.id: r.cancel_requested_at for r in rows}
    return [rid for rid in response_ids if rid not in renewed or renewed[rid] is not None]


async def delete_response(conn: AsyncConnection, response_id: str, account_id: str | None) -> Status | None:
    """Deletes the response, its items and events, and returns the status it had (None: no such
    response). Responses chained from it keep their context less the deleted turn's items. A
    queued response deleted never runs; a running one's late writes find no row and are dropped,
    but its worker must still be told to stop."""
    query = delete(responses).where(responses.c.id == response_id)
    if account_id is not None:
        query = query.where(responses.c.account_id == account_id)
    gone = (await conn.execute(query.returning(responses.c.status, responses.c.conversation_id))).one_or_none()
    if gone is None:
        return None
    if gone.conversation_id is not None:  # its items leave the conversation with it
        await conversations_db.count_removal(conn, gone.conversation_id)
    status: Status = gone.status
    return status

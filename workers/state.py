"""What a worker process holds (`WorkerState`, in arq's ctx as "state"): its connections, the
event writer, the runtime client, the generations running, and the side tasks that keep them."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy.exc import DBAPIError

from app.catalog import Catalog, OpenAIModel
from app.embeddings.embedders import Embedders
from app.events.writer import EventWriter
from app.housekeeping import live_log, reaper, retention
from app.housekeeping.process_state import ProcessState, open_engines
from app.process.batching import Batched
from app.process.egress import EgressGuard
from app.process.url_fetch import UrlFetcher
from app.protocol.response_object import ResponseRecord
from app.queue import heartbeats, placement
from app.queue.ingestion import enqueue_ingestions
from app.queue.jobs import QueueRedis
from app.queue.redis_keys import STEER_CHANNEL, STOP_CHANNEL, events_channel
from app.queue.redis_link import REDIS_LINK, Backoff
from app.queue.redis_listener import listen_for_ever
from app.settings import Settings
from app.storage import responses as responses_db
from app.storage import vector_store_files as store_files_db
from app.storage.driver import refused_data
from app.storage.held import HeldConnection
from app.web_search.backend import SearchBackend
from app.web_search.configured import configured_backend
from workers.caches.chain_contexts import ChainContexts
from workers.caches.conversation_items import ConversationItems
from workers.leases import LeaseKeeper
from workers.runtimes.client import ChatRuntimeClient
from workers.runtimes.supervisor import RuntimeSupervisor
from workers.translation.translate import StreamTranslator

log = logging.getLogger(__name__)

# The connections of the claims and the event writer, held (app/storage/held.py): a pool of their
# own, as an API process's (app/service/state.py).
HELD_CONNECTIONS = 2
# How long a job that came before its response's row waits for the row (`claim_when_stored`).
STORED_WAIT_SECONDS = 10.0


_WORKERS_IN_PROCESS = itertools.count(1)


def new_worker_id() -> str:
    """A worker's id: its host and process (`host:pid`), and for a second worker in one process
    (the tests' in-process servers) its number with the host (`host-2:pid`): no two workers share
    a heartbeat, a lease or a placement, and every id ends with its process."""
    number = next(_WORKERS_IN_PROCESS)
    host = socket.gethostname() if number == 1 else f"{socket.gethostname()}-{number}"
    return f"{host}:{os.getpid()}"


@dataclass
class WorkerState(ProcessState):
    writer: EventWriter
    runtime: ChatRuntimeClient
    # The model server this worker started and keeps running (a `worker --model` only).
    supervisor: RuntimeSupervisor | None = None
    worker_id: str = field(default_factory=new_worker_id)
    queue_name: str = ""  # the queue it takes jobs from (open() sets it)
    draining: bool = False  # shutting down: no new job; its generations finish or are handed over
    # Generations running in this process, by response id: what a stop signal cancels.
    running: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    # Responses a job of this worker claims or runs: a second job of the same one does nothing.
    taken: set[str] = field(default_factory=set)
    # The store=false ones among them: kept alive by a Redis key instead of a Postgres lease.
    transient: set[str] = field(default_factory=set)
    # Those among them a client steered (WebSocket mode): each ends at its next output boundary.
    steered: set[str] = field(default_factory=set)
    # The translators of the generations running, which a steer reaches in the middle of an answer.
    translators: dict[str, StreamTranslator] = field(default_factory=dict)
    _claims: Batched[str, responses_db.Claim] = field(init=False)
    _carried_claims: Batched[str, responses_db.CarriedClaim] = field(init=False)
    _claiming_stores: Batched[responses_db.NewResponse, bool] = field(init=False)
    _placements: Batched[str, None] = field(init=False)
    # The embedding models this worker embeds files' chunks with, made when first used.
    embedders: Embedders = field(default_factory=Embedders)
    conversations: ConversationItems = field(init=False)
    chains: ChainContexts = field(init=False)
    # The backend the web_search tool asks (RESPONSES_WEB_SEARCH_URL), if one is configured, and
    # what fetches the pages its searches open (through the egress guard).
    web_search: SearchBackend | None = field(init=False)
    page_fetcher: UrlFetcher | None = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.conversations = ConversationItems(int(self.settings.conversation_cache_mb * 1_000_000))
        self.chains = ChainContexts(int(self.settings.chain_cache_mb * 1_000_000))
        # What the MCP servers a caller names may be (workers/tool_loop/mcp_transport.py).
        self.mcp_guard = EgressGuard.from_config(self.settings.mcp_allow)
        self.web_search = configured_backend(self.settings)
        self.page_fetcher = None
        if self.web_search is not None:
            settings = self.settings
            self.page_fetcher = UrlFetcher.from_config(settings.web_fetch_allow, settings.web_search_timeout_seconds)
        self._claims = Batched(self._claim_many, "claims")
        self._carried_claims = Batched(self._claim_carried_many, "carried-claims")
        self._claiming_stores = Batched(self._store_claimed_many, "claiming-stores")
        self._placements = Batched(self._hold_many, "placements")
        self.claim_connection = HeldConnection(self.held_engine)
        # A generation whose events can no longer be written (refused, or its response ended
        # elsewhere) stops reading its runtime at once.
        self.writer.on_dropped = self.stop_generation
        self.lease_keeper = LeaseKeeper(self.settings, self.worker_id, self._running_now, self.stop_generation)

    async def claim(self, response_id: str) -> responses_db.Claim | None:
        """This response, claimed for this worker, with its context; None if another worker has it
        or it ended. The claims of the jobs starting together are made by one statement."""
        return await self._claims(response_id)

    async def claim_when_stored(self, response_id: str) -> int | None:
        """`claim` for a response whose job carries it and may come before its row
        (app/service/enqueueing.py: one that starts afresh is stored beside its enqueue): the times
        it was continued before, or None. Nothing else is read back: its job carries its record,
        and its context is its input. While its row is not there, it is claimed again: at once
        the first time (under load the job overtakes an insert that is about to commit), then
        backing off; for STORED_WAIT_SECONDS at most: its create failed, or its insert was slower
        than that (then, queued and with no job, it is enqueued again by the reaper,
        app/housekeeping/reaper.py)."""
        backoff = Backoff(first=0.001, most=0.1)
        deadline = time.monotonic() + STORED_WAIT_SECONDS
        at_once = True
        while (found := await self._carried_claims(response_id)) is None:
            if time.monotonic() >= deadline:
                log.warning("response %s: not stored %.0f s after its job; left", response_id, STORED_WAIT_SECONDS)
                return None
            if not at_once:
                await asyncio.sleep(backoff.next())
            at_once = False
        return found.continuations

    async def claim_by_storing(self, new: responses_db.NewResponse) -> int | None:
        """`claim_when_stored` for a foreground response that starts afresh, which its worker
        stores (app/service/enqueueing.py): stored claimed by this worker, in one statement; if its
        API stored it first (its job waited), claimed as it is. None if Postgres refused it (its API
        tells its client) or it is not this worker's."""
        try:
            stored = await self._claiming_stores(new)
        except DBAPIError as error:
            if not refused_data(error):
                raise
            log.warning("response %s: Postgres refused to store it: %s", new.record.id, error.orig)
            return None
        if stored:
            return 0
        return await self.claim_when_stored(new.record.id)

    async def _store_claimed_many(
        self, new: list[responses_db.NewResponse]
    ) -> dict[responses_db.NewResponse, bool | Exception]:
        claimant = responses_db.Claimant(self.worker_id, self.settings.lease_seconds)
        async with self.claim_connection.use() as conn:
            return await responses_db.insert_refusing_alone(conn, new, claimant)

    async def _claim_carried_many(self, response_ids: list[str]) -> dict[str, responses_db.CarriedClaim]:
        async with self.claim_connection.use() as conn:
            return await responses_db.claim_carried(conn, response_ids, self.worker_id, self.settings.lease_seconds)

    async def _claim_many(self, response_ids: list[str]) -> dict[str, responses_db.Claim]:
        async with self.claim_connection.use() as conn:  # one atomic claim, then the contexts
            claims = await responses_db.claim_many(
                conn, response_ids, self.worker_id, self.settings.lease_seconds, self.chains.read
            )
            # A response in a conversation sees the conversation's items first (one runs on it at a time).
            in_conversations = {
                c.record.id: conversation["id"]
                for c in claims.values()
                if (conversation := c.record.settings.get("conversation"))
            }
            if not in_conversations:
                return claims
            earlier = await self.conversations.read(conn, set(in_conversations.values()))
        for response_id, conversation_id in in_conversations.items():
            claim = claims[response_id]
            claims[response_id] = replace(claim, context=earlier[conversation_id] + claim.context)
        return claims

    async def hold_contexts(self, record: ResponseRecord) -> None:
        """The response's contexts are in this worker's engine from now on: the responses that
        continue them are placed here (app/queue/placement.py). Those of responses starting
        together are written by one round trip."""
        if self.settings.placement_wait_ms:
            with REDIS_LINK.tolerated("placement"):  # (without it, the next turn goes to any worker)
                await asyncio.gather(*(self._placements(c) for c in placement.contexts_held(record)))

    async def _hold_many(self, contexts: list[str]) -> dict[str, None]:
        await placement.remember(self.redis, self.worker_id, contexts)
        return {}

    @classmethod
    def open(
        cls,
        settings: Settings,
        redis: QueueRedis,
        catalog: Catalog,
        supervisor: RuntimeSupervisor | None = None,
        queue_name: str | None = None,
        worker_id: str | None = None,
    ) -> WorkerState:
        """`queue_name`: the queue the worker takes jobs from (its hosted model's, or the shared one);
        `worker_id`: the id its queue worker places jobs by (else a new one)."""
        engine, held_engine = open_engines(settings, HELD_CONNECTIONS)
        worker_id = worker_id or new_worker_id()
        return cls(
            settings=settings,
            catalog=catalog,
            supervisor=supervisor,
            engine=engine,
            held_engine=held_engine,
            redis=redis,
            worker_id=worker_id,
            queue_name=queue_name or settings.queue_name,
            writer=EventWriter(
                held_engine,
                redis,
                events_channel(settings.queue_name),
                worker_id=worker_id,
                commit_interval=settings.event_commit_interval,
                commit_patience=settings.postgres_outage_seconds,
            ),
            runtime=ChatRuntimeClient(settings.runtime_connect_timeout, settings.runtime_read_timeout),
            embedders=Embedders(redis, settings.queue_name, settings.embed_timeout),
        )

    def start(self) -> None:
        super().start()
        self.writer.start()
        self.lease_keeper.start()
        self.side_tasks.start("stop-listener", self._listen_for_stops)
        self.side_tasks.start("steer-listener", self._listen_for_steers)
        self.side_tasks.start_every("housekeeping", self.settings.housekeeping_seconds, self._housekeeping)
        self.side_tasks.start_every("retention", self.settings.retention_interval_seconds, self._retention)
        self.side_tasks.start_every(
            "live-log-vacuum", self.settings.live_log_vacuum_seconds, partial(live_log.vacuum, self.engine)
        )

    async def close(self) -> None:
        await self.stop_loops()
        with REDIS_LINK.tolerated("removing this worker's heartbeat"):  # (else it expires)
            await heartbeats.stop_beating(self.redis, self.worker_id, self.queue_name)
        await self.lease_keeper.close()
        await self.writer.close()
        await self.claim_connection.close()
        await self.runtime.aclose()
        await self.embedders.close()
        if self.web_search is not None:
            await self.web_search.close()
        if self.page_fetcher is not None:
            await self.page_fetcher.close()
        await self.dispose_engines()
        if self.supervisor is not None:  # last: generations have ended by now
            await self.supervisor.shut_down()

    async def _requeue_lost_ingestions(self) -> None:
        """Files still to be ingested whose job is lost (a worker died holding one, or Redis
        lost it) get a job again, each from the workers of its queue (the base queue's, or those
        hosting the store's embedding model): the ingestion goes on from the chunks stored."""
        async with self.engine.connect() as conn:
            lost = await store_files_db.lost(conn, self.settings.requeue_after_seconds)
        base = self.settings.queue_name
        ours = [
            (f.vector_store_id, f.file_id, f.attempts)
            for f in lost
            if self.catalog.embedding_queue_for(f.embedding_model, base) == self.queue_name
        ]
        await enqueue_ingestions(self.redis, self.queue_name, ours)

    def stop_generation(self, response_id: str) -> None:
        task = self.running.get(response_id)
        if task is not None:
            task.cancel()

    async def _listen_for_stops(self) -> None:
        # Stops missed while Redis is away are not lost: the lease keeper reads them from Postgres.
        async def stop(response_id: bytes) -> None:
            self.stop_generation(response_id.decode())

        await listen_for_ever(self.redis, STOP_CHANNEL, stop)

    def steer_generation(self, response_id: str) -> None:
        if response_id not in self.taken:  # (every worker hears every steer)
            return
        self.steered.add(response_id)
        translator = self.translators.get(response_id)
        if translator is not None:
            translator.steered = True

    async def _listen_for_steers(self) -> None:
        async def steer(response_id: bytes) -> None:
            self.steer_generation(response_id.decode())

        await listen_for_ever(self.redis, STEER_CHANNEL, steer)

    def _running_now(self) -> tuple[frozenset[str], frozenset[str]]:
        """The durable and the transient generations running now; called from the lease keeper's
        thread, so it only copies."""
        transient = frozenset(self.transient)
        return frozenset(self.running) - transient, transient

    async def _retention(self) -> None:
        policy = retention.RetentionPolicy.from_settings(self.settings)
        await retention.apply(self.engine, policy, report_every=self.settings.retention_interval_seconds)

    async def announce(self) -> None:
        """Writes this worker's heartbeat now, not at its first housekeeping: a worker shutting down
        looks for the others there."""
        with REDIS_LINK.tolerated("worker heartbeat"):
            await self._beat()

    async def begin_draining(self) -> bool:
        """This worker is shutting down: it takes no new job (arq stops picking them), says so on
        its /ready and in its heartbeat; returns whether another worker of its queue is alive to
        take its generations over at once."""
        self.draining = True
        with REDIS_LINK.tolerated("draining"):
            await self._beat()
            return await heartbeats.others_taking(self.redis, self.queue_name, self.worker_id)
        return False

    def heartbeat(self) -> dict[str, object]:
        """What `responses-server status` shows of this worker, and what a worker shutting down
        reads to know whether another of its queue is alive."""
        hosted = self.supervisor.name if self.supervisor is not None else None
        runtime = None if self.supervisor is None else "ok" if self.supervisor.healthy else "restarting"
        serves = [hosted] if hosted else [e.id for e in self.catalog.entries if isinstance(e, OpenAIModel)]
        return {
            "worker_id": self.worker_id,
            "models": serves,
            "running": len(self.running),
            "max_jobs": self.settings.worker_max_jobs,
            "runtime": runtime,
            "queue": self.queue_name,
            "draining": self.draining,
        }

    async def _beat(self) -> None:
        await heartbeats.beat(
            self.redis, self.worker_id, self.heartbeat(), max(15, int(3 * self.settings.housekeeping_seconds))
        )

    async def _housekeeping(self) -> None:
        with REDIS_LINK.tolerated("worker heartbeat"):
            await self._beat()
        await self.reap(spare=frozenset(self.running))
        with REDIS_LINK.tolerated("requeue ingestions"):
            await self._requeue_lost_ingestions()
        with REDIS_LINK.tolerated("requeue"):
            await reaper.requeue_lost_jobs(
                self.engine, self.redis, self.catalog, self.settings.queue_name, self.settings.requeue_after_seconds
            )

"""What an API process holds, opened by the lifespan and closed with it: what every process holds
(ProcessState), and what serves requests (the event hub, batched authentication, inserts and
enqueues, the event log reader)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy.exc import DBAPIError

from app.catalog import Catalog
from app.embeddings.embedders import Embedders
from app.events import log_reader
from app.events.hub import EventHub
from app.events.log_reader import LogReader
from app.events.log_sources import LogSource, RedisOnlyLog, StoredLog
from app.housekeeping.process_state import ProcessState, open_engines
from app.process.batching import Batched
from app.process.url_fetch import UrlFetcher
from app.protocol.mcp_tools import McpPolicy
from app.queue.jobs import GenerateJob, enqueue_many, queue_pool
from app.queue.redis_keys import events_channel
from app.service.known_keys import KnownKeys
from app.settings import Settings
from app.storage import accounts as accounts_db
from app.storage import responses as responses_db
from app.storage import vector_index
from app.storage.held import HeldConnection, HeldConnections

INSERT_LANES = 4  # foreground inserts running at once, at most (each lane a held connection)
# Authentication (and its listener for changed keys), inserts and event log reads run on held
# connections (app/storage/held.py), from a pool of their own: kept for good once opened, they
# would otherwise take, after a burst that opened every lane, the connections requests wait for;
# and they never wait for those.
HELD_CONNECTIONS = 2 + INSERT_LANES + log_reader.LANES


log = logging.getLogger(__name__)

NO_PGVECTOR = (
    "PostgreSQL has no pgvector extension here (CREATE EXTENSION vector, then `responses-server migrate`): "
    "vector stores and file_search are unavailable; everything else works"
)


@dataclass
class AppState(ProcessState):
    hub: EventHub
    _authentications: Batched[str, accounts_db.Caller] = field(init=False)
    _enqueues: Batched[GenerateJob, bool] = field(init=False)
    _inserts: Batched[responses_db.NewResponse, bool] = field(init=False)
    # Vector stores: pgvector's version (None: not there, or not yet known), and the embedders.
    pgvector: str | None = None
    _said_no_pgvector: bool = False
    embedders: Embedders = field(default_factory=Embedders)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.mcp_policy = McpPolicy.from_config(self.settings.mcp, self.settings.mcp_server_urls)
        self.urls = (
            UrlFetcher.from_config(self.settings.image_fetch_allow, self.settings.image_fetch_timeout)
            if self.settings.image_urls == "fetch"
            else None
        )
        self.auth_connection = HeldConnection(self.held_engine)
        self._authentications = Batched(self._accounts_for_hashes, "authenticate")
        self.known_keys = KnownKeys(self._authentications)
        wait_ms = self.settings.placement_wait_ms
        self._enqueues = Batched(partial(enqueue_many, self.redis, placement_wait_ms=wait_ms), "enqueue")
        # Inserts that wait behind a slow one (a lock, a very large request) go beside it.
        self.insert_connections = HeldConnections(self.held_engine, INSERT_LANES)
        self._inserts = Batched(self._insert_responses, "store", lanes=INSERT_LANES)
        # The event logs followers read: one statement for all that ask at the same moment.
        self.log_reader = LogReader(self.held_engine)

    def start(self) -> None:
        super().start()
        # Every API process reaps lost generations: a model with no worker alive still ends them.
        self.side_tasks.start_every("reaper", self.settings.housekeeping_seconds, self.reap)
        self.side_tasks.start("known-keys", partial(self.known_keys.listen, self.held_engine))

    async def authenticate(self, key_hash: str) -> accounts_db.Caller | None:
        """The caller whose API key has this hash; None if none has. Kept from a request to the
        next while no key or account changes (app/service/known_keys.py); the requests arriving
        together are authenticated by one statement."""
        return await self.known_keys.caller(key_hash)

    async def enqueue(self, job: GenerateJob) -> bool:
        """Hands a job to the workers; False if its queue had it already. The jobs handed over
        together go by one script call per queue."""
        return bool(await self._enqueues(job))

    async def store(self, new: responses_db.NewResponse) -> None:
        """Stores a response and its opening events (raising what Postgres refused of it alone),
        unless it is stored already (by its worker). The responses stored together go by one
        statement."""
        await self._inserts(new)

    async def _accounts_for_hashes(self, key_hashes: list[str]) -> dict[str, accounts_db.Caller]:
        # One statement in autocommit: no BEGIN/COMMIT round trips.
        async with self.auth_connection.use() as conn:
            return await accounts_db.accounts_for_hashes(conn, key_hashes)

    async def _insert_responses(
        self, new: list[responses_db.NewResponse]
    ) -> dict[responses_db.NewResponse, bool | Exception]:
        async with self.insert_connections.use() as conn:  # one atomic statement
            return await responses_db.insert_refusing_alone(conn, new)

    @classmethod
    async def open(cls, settings: Settings) -> AppState:
        redis = queue_pool(settings.redis_url, settings.queue_name)
        engine, held_engine = open_engines(settings, HELD_CONNECTIONS)
        hub = EventHub(redis, events_channel(settings.queue_name), settings.follow_idle_seconds, engine)
        await hub.start()
        state = cls(settings, Catalog.load(settings.models_path), engine, held_engine, redis, hub)
        state.embedders = Embedders(redis, settings.queue_name, settings.embed_timeout)
        await state.check_pgvector()
        state.start()
        return state

    async def check_pgvector(self) -> str | None:
        """pgvector's version, found once (then its vector indexes are made for the catalog's
        embedding lengths); None while it is not there, said once in the log."""
        if self.pgvector is None:
            try:
                self.pgvector = await vector_index.pgvector_version(self.engine)
            except (DBAPIError, OSError):
                return None  # (asked again when a vector store is next used)
            if self.pgvector is None:
                if not self._said_no_pgvector:
                    log.warning(NO_PGVECTOR)
                    self._said_no_pgvector = True
                return None
            for dimensions in {entry.dimensions for entry in self.catalog.embedding_models}:
                try:
                    await vector_index.ensure_index(self.engine, dimensions)
                except (DBAPIError, OSError) as error:
                    log.warning("the vector index of %d dimensions was not made: %s", dimensions, error)
        return self.pgvector

    async def close(self) -> None:
        await self.stop_loops()
        await self.embedders.close()
        if self.urls is not None:
            await self.urls.close()
        await self.hub.close()
        await self.auth_connection.close()
        await self.insert_connections.close()
        await self.log_reader.close()
        await self.redis.aclose(close_connection_pool=True)
        await self.dispose_engines()

    def log_source(self, durable: bool) -> LogSource:
        settings = self.settings
        if durable:
            return StoredLog(self.log_reader, postgres_patience=settings.postgres_outage_seconds)
        return RedisOnlyLog(
            self.redis, redis_patience=settings.redis_outage_seconds, lease_seconds=settings.lease_seconds
        )

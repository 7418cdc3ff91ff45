"""Everything this project relies on in arq beyond its public API, in this one module.

arq is the queue (the design card names it). Its public API costs more than token latency and
GPU batching allow, for the reasons and with the numbers in docs/architecture.md ("The queue
seam"). What is used of its internals is named here and nowhere else: its Redis key layout
(`arq.constants`); its job encoding (`serialize_job`, `deserialize_job_raw`); its Worker's job
accounting (`start_jobs`, `sem`, `job_counter`, `tasks`, `functions`,
`_release_sem_dec_counter_on_complete`, the `jobs_*` counters); and the steps of its main loop and
shutdown that are overridden to ride out Redis outages and to hand generations over on SIGTERM
(`_poll_iteration`; `close`, with `_handle_signals`, `handle_sig` and `health_check_key`;
`handle_sig_wait_for_completion`, with `_wait_for_tasks_to_complete` and `_job_completion_wait`).
pyproject.toml pins arq to the minor version this was written against;
tests/integration/test_arq_seam.py fails if any of it changes in the installed arq.

The enqueue: one script call for any number of jobs, stored exactly as `ArqRedis.enqueue_job`
stores them, and the workers woken by the same call.

The worker, adapted to hundreds of long jobs and to token latency:

- arq keeps a job in the queue's sorted set until it finishes, and every poll lists every job
  due and re-checks each with three Redis round trips: with hundreds of running generations
  that was most of a worker's CPU. Here a taken job's score moves to when its in-progress mark
  expires, so polls list only the jobs waiting, and list a job again exactly when arq would take
  it again had its worker vanished. Jobs this worker is starting are skipped outright; a listed
  job found running elsewhere (taken by a worker that does not move scores, as during a rolling
  upgrade) is skipped for a second.
- arq only learns of a new job when it polls (on average half a poll interval late). The API
  publishes each new job's id, and the worker starts that job the moment it hears it (once its
  startup, which may wait for a model server, is done); polling stays as the safety net.
- Starting a job took arq about eight event-loop turns (four round trips to take it, one to read
  it, a task to run it and a task to run the function), each as long as the worker is busy with
  token traffic: with hundreds of streams, that was most of a new response's time to first
  token. Here a job is taken and read by one script, with arq's keys and semantics (the
  in-progress key, the try counter, the job removed from the queue when it ends), and its
  function runs inside the task that took it. Jobs start side by side, never one after another.
  A job placed on this worker that carries its response is heard with its data, and its
  function starts while the take is in flight (`_run_while_taken`).
- Jobs that start or end while a take or a removal is in flight are taken or removed together,
  by one script call (app/process/batching.py).
- A job holds one of the worker's `max_jobs` slots while it is taken and run, not while its keys
  are removed afterwards: with as many streams as slots, each new response would otherwise wait
  for an ended one's removal round trip.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import deserialize_job_raw, serialize_job
from arq.utils import timestamp_ms
from arq.worker import Worker

from app.process.batching import Batched
from app.process.metrics import PLACEMENTS
from app.process.side_tasks import SideTasks
from app.queue.redis_keys import (
    LOAD_PREFIX,
    LOAD_TTL_SECONDS,
    PLACEMENT_PREFIX,
    QUEUE_WORKERS_PREFIX,
    WORKER_PREFIX,
    placed_channel,
    wake_channel,
)
from app.queue.redis_link import REDIS_DOWN, REDIS_LINK, Backoff
from app.queue.redis_listener import listen_for_ever

log = logging.getLogger(__name__)

JOB_PREFIX = job_key_prefix  # a queued job's data, under its id
IN_PROGRESS_PREFIX = in_progress_key_prefix  # set while a worker runs the job


def serialized_job(function: str, args: tuple[Any, ...], now_ms: int, serializer: Any) -> bytes:
    """A job as arq stores it (no kwargs, no try yet)."""
    return serialize_job(function, args, {}, None, now_ms, serializer=serializer)


# arq's enqueue (WATCH, EXISTS, MULTI/EXEC: three round trips per job) and our wake-up, as one
# script for any number of jobs of one queue: each job is stored exactly as
# arq.connections.ArqRedis.enqueue_job stores it (same keys, same serialized job), unless a job
# or result with its id exists, and workers are woken at once by one message naming the new
# jobs. With a placement wait, each job is placed (app/queue/placement.py) on one of the workers
# of the queue alive and not draining: the holder of the first context it continues while the
# holder's load (jobs taken, not ended) is within PLACEMENT_SLACK of the least loaded's, else the
# least loaded (ties: the holder, then the set's order); each job placed here counts at once. A
# placed job is stored as due when the wait ends (arq's deferred job), and its worker alone is
# told, on its own channel (redis_keys.placed_channel): by one message naming the jobs, or, for a
# job to be heard with its data, by a message of its own, its id and its serialized job (the
# worker may start it while it takes it: `QueueWorker._run_while_taken`). Workers whose heartbeat
# is gone leave the queue's set. KEYS[1]: the queue, KEYS[2]: its wake-up channel, KEYS[3]: its
# set of workers; ARGV: expiry (ms), now (ms), the placement wait (ms; 0: none), arq's job and
# result key prefixes, our placement, heartbeat and load key prefixes, the queue's placed
# channels' prefix (a worker's channel is it and the worker's id), then for each job its id, its
# serialized job, whether its worker is to hear it with its data (1/0), the number of contexts it
# continues and those contexts. Returns per job:
# 0 not added (it exists), 1 added for any worker, 2 placed on its context's holder, 3 placed on
# the least loaded worker.
_ENQUEUE = """
local added, ids, placed = {}, {}, {}
local now, wait = tonumber(ARGV[2]), tonumber(ARGV[3])
local workers, loads = {}, {}
if wait > 0 then
    for _, worker in ipairs(redis.call('SMEMBERS', KEYS[3])) do
        local ok, state = pcall(cjson.decode, redis.call('GET', ARGV[7] .. worker) or 'null')
        if not (ok and type(state) == 'table' and state['queue'] == KEYS[1]) then
            redis.call('SREM', KEYS[3], worker)
        elseif state['draining'] == false then
            table.insert(workers, worker)
            loads[worker] = tonumber(redis.call('GET', ARGV[8] .. worker) or '0')
        end
    end
end
local i = 10
while i <= #ARGV do
    local id, contexts = ARGV[i], tonumber(ARGV[i + 3])
    if redis.call('EXISTS', ARGV[4] .. id, ARGV[5] .. id) > 0 then
        table.insert(added, 0)
    else
        local holder, least = nil, nil
        for c = i + 4, i + 3 + contexts do
            local found = #workers > 0 and redis.call('GET', ARGV[6] .. ARGV[c])
            if found and loads[found] then holder = found break end
        end
        for _, worker in ipairs(workers) do
            if least == nil or loads[worker] < loads[least] then least = worker end
        end
        local worker, flag = nil, 1
        if holder and loads[holder] <= loads[least] * PLACEMENT_SLACK_SHARE + PLACEMENT_SLACK_JOBS then
            worker, flag = holder, 2
        elseif least then
            worker, flag = least, 3
        end
        redis.call('PSETEX', ARGV[4] .. id, ARGV[1], ARGV[i + 1])
        if worker then
            loads[worker] = loads[worker] + 1
            redis.call('ZADD', KEYS[1], now + wait, id)
            if ARGV[i + 2] == '1' then
                redis.call('PUBLISH', ARGV[9] .. worker, id .. '\\n' .. ARGV[i + 1])
            else
                placed[worker] = placed[worker] or {}
                table.insert(placed[worker], id)
            end
        else
            redis.call('ZADD', KEYS[1], now, id)
            table.insert(ids, id)
        end
        table.insert(added, flag)
    end
    i = i + 4 + contexts
end
if #ids > 0 then redis.call('PUBLISH', KEYS[2], table.concat(ids, ' ')) end
for worker, jobs in pairs(placed) do redis.call('PUBLISH', ARGV[9] .. worker, table.concat(jobs, ' ')) end
return added
""".replace("PLACEMENT_SLACK_SHARE", "1.25").replace("PLACEMENT_SLACK_JOBS", "2")
_JOB_EXPIRY_MS = 86_400_000  # arq's default expires_extra_ms: an unstarted job lives a day


def now_ms() -> int:
    return timestamp_ms()


NOT_ADDED, ADDED, PLACED_ON_HOLDER, PLACED_ON_LEAST_LOADED = 0, 1, 2, 3  # what the enqueue did with a job


@dataclass(frozen=True, slots=True)
class SerializedJob:
    job_id: str
    data: bytes
    continues: tuple[str, ...] = ()  # the contexts it continues, to be placed by (app/queue/placement.py)
    # Whether its worker, if it is placed, hears it with its data (`QueueWorker._run_while_taken`).
    heard_with_data: bool = False


async def enqueue_serialized(
    queue: ArqRedis, queue_name: str, jobs: list[SerializedJob], enqueued_ms: int, placement_wait_ms: int = 0
) -> list[int]:
    """Stores each job unless a job or result with its id exists, placed on a worker if
    `placement_wait_ms` (see `_ENQUEUE`), and wakes the queue's workers; returns, per job, what
    was done with it (NOT_ADDED, ADDED, PLACED_ON_HOLDER, PLACED_ON_LEAST_LOADED)."""
    script = queue.register_script(_ENQUEUE)
    args: list[Any] = [_JOB_EXPIRY_MS, enqueued_ms, placement_wait_ms, job_key_prefix, result_key_prefix]
    args += [PLACEMENT_PREFIX, WORKER_PREFIX, LOAD_PREFIX, placed_channel(queue_name, "")]
    for job in jobs:
        args += [job.job_id, job.data, int(job.heard_with_data), len(job.continues), *job.continues]
    keys = [queue_name, wake_channel(queue_name), QUEUE_WORKERS_PREFIX + queue_name]
    return [int(flag) for flag in await script(keys=keys, args=args)]


async def remove_jobs(queue: ArqRedis, queue_name: str, job_ids: list[str]) -> None:
    """Removes jobs as arq removes an ended one (its keys and its queue entry): the jobs of a
    worker that died, whose responses another process has taken up. Left, each would stay
    listed (and be taken again, to no end) until its in-progress mark expired, the job timeout
    later."""
    if job_ids:
        prefixes = [in_progress_key_prefix, retry_key_prefix, job_key_prefix]
        await queue.register_script(_REMOVE)(keys=[queue_name], args=[*prefixes, "", *job_ids])


# Takes jobs as arq's start_jobs and run_job do together (not running elsewhere, due, then
# marked in progress, its try counted); returns {job id, job or false if expired, try number}
# for each job taken. A taken job's score moves to when its in-progress mark expires: polls
# (max score: now) stop listing it while it runs, and see it again exactly when arq would take it
# again had its worker vanished. A job placed on the worker taking it is taken before it is due.
# The jobs taken count in the worker's load (its key, if it keeps one). KEYS[1]: the queue; ARGV:
# now (ms), the in-progress timeout (ms), arq's key prefixes for in-progress, job and retry keys,
# the load key ('' for none) and its lifetime (s), then each job's id and whether it was placed
# here (1/0; 2: placed here and heard with its data, which is then not sent back: false).
_TAKE = """
local taken = {}
for i = 8, #ARGV, 2 do
    local id = ARGV[i]
    local in_progress, retry = ARGV[3] .. id, ARGV[5] .. id
    local score = redis.call('ZSCORE', KEYS[1], id)
    local due = ARGV[i + 1] ~= '0' or (score and tonumber(score) <= tonumber(ARGV[1]))
    if redis.call('EXISTS', in_progress) == 0 and score and due then
        redis.call('PSETEX', in_progress, ARGV[2], '1')
        redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
        local tries = redis.call('INCR', retry)
        redis.call('EXPIRE', retry, 88400)
        local data = false
        if ARGV[i + 1] ~= '2' then data = redis.call('GET', ARGV[4] .. id) end
        table.insert(taken, {id, data, tries})
    end
end
if ARGV[6] ~= '' and #taken > 0 then
    redis.call('INCRBY', ARGV[6], #taken)
    redis.call('EXPIRE', ARGV[6], ARGV[7])
end
return taken
"""
# A placed job its worker cannot take now, due at once for every worker unless taken meanwhile.
# KEYS[1]: the queue; ARGV: now (ms), arq's in-progress prefix, then the job ids.
_HAND_ON = """
for i = 3, #ARGV do
    if redis.call('EXISTS', ARGV[2] .. ARGV[i]) == 0 then redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i]) end
end
"""
# Removes ended jobs as arq does (in-progress, retry and job keys, queue entry), and takes them out
# of their worker's load (its key, if it keeps one: '' for none). KEYS[1]: the queue; ARGV: arq's
# in-progress, retry and job key prefixes, the load key, then the job ids.
_REMOVE = """
local removed = 0
for i = 5, #ARGV do
    local id = ARGV[i]
    redis.call('DEL', ARGV[1] .. id, ARGV[2] .. id, ARGV[3] .. id)
    removed = removed + redis.call('ZREM', KEYS[1], id)
end
if ARGV[4] ~= '' and removed > 0 and redis.call('DECRBY', ARGV[4], removed) < 0 then redis.call('SET', ARGV[4], 0) end
"""


@dataclass(frozen=True, slots=True)
class TakeOf:
    """A job to take: `placed` on this worker (taken before it is due), `heard_with_data` (its
    data is not read back)."""

    job_id: str
    placed: bool
    heard_with_data: bool = False


async def _finish_here() -> bool:
    return False


class QueueWorker(Worker):
    ELSEWHERE_SECONDS = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._elsewhere: dict[bytes, float] = {}
        self._in_slots: set[str] = set()  # jobs counted against max_jobs: being taken or run
        # A wake-up found every slot taken: the queue is looked at again as soon as one frees,
        # rather than at the next poll (which, with wake-ups, can be far apart).
        self._woken_when_full = False
        self._refill: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._take = Batched[TakeOf, tuple[bytes | None, int]](self._take_many, "take-jobs")
        self._remove = Batched[str, None](self._remove_many, "remove-jobs")
        self._poll_backoff = Backoff()
        # On SIGTERM, whether the running jobs are to be cancelled at once (see _drain).
        self.on_drain: Callable[[], Awaitable[bool]] = _finish_here
        # Where jobs placed on this worker are announced (app/queue/placement.py); None: nowhere.
        self.placement_id: str | None = None
        startup = self.on_startup

        async def on_startup(ctx: dict[str, Any]) -> None:
            if startup is not None:
                await startup(ctx)
            self._take_script = self.pool.register_script(_TAKE)
            self._hand_on_script = self.pool.register_script(_HAND_ON)
            self._remove_script = self.pool.register_script(_REMOVE)
            self._started.set()

        self.on_startup = on_startup

    async def main(self) -> None:
        await self._until_redis_answers()  # arq's main asks Redis for its INFO first thing
        listener = SideTasks()
        listener.start("wake-listener", self._listen_for_wakeups)
        if self.placement_id is not None:
            listener.start("placement-listener", self._listen_for_placed)
        try:
            await super().main()
        finally:
            await listener.close()

    async def start_jobs(self, job_ids: list[bytes], placed: bool = False, data: bytes | None = None) -> None:
        """`placed`: the jobs were placed on this worker, and are taken before they are due.
        `data`: the one job's serialized job, heard with it (see `_run_while_taken`)."""
        now, heard_at = time.monotonic(), time.time()
        for job_id_b in job_ids:
            job_id = job_id_b.decode()
            if job_id in self.tasks or self._elsewhere.get(job_id_b, 0.0) > now:
                continue
            if self.job_counter >= self.max_jobs:
                self._woken_when_full = True
                return
            await self.sem.acquire()  # never waits below max_jobs; kept for arq's own accounting
            self.job_counter += 1
            self._in_slots.add(job_id)
            task = asyncio.create_task(self._take_and_run(job_id_b, heard_at, placed, data))
            task.add_done_callback(partial(self._job_done, job_id))
            self.tasks[job_id] = task

    def _job_done(self, job_id: str, _: asyncio.Task[None]) -> None:
        self._free_slot(job_id)  # (a task cancelled before it started never freed it)

    def _free_slot(self, job_id: str) -> None:
        if job_id not in self._in_slots:
            return
        self._in_slots.discard(job_id)
        self._release_sem_dec_counter_on_complete()
        if self._woken_when_full and self.allow_pick_jobs and (self._refill is None or self._refill.done()):
            self._woken_when_full = False
            self._refill = asyncio.create_task(self._start_waiting_jobs(), name="refill")

    async def _start_waiting_jobs(self) -> None:
        try:
            waiting = await self.pool.zrangebyscore(
                self.queue_name, min=float("-inf"), max=timestamp_ms(), start=0, num=self.queue_read_limit
            )
            await self.start_jobs(waiting)
        except REDIS_DOWN as error:  # the next poll does it
            REDIS_LINK.failed("looking for waiting jobs", error)

    async def _take_and_run(self, job_id_b: bytes, heard_at: float, placed: bool, data: bytes | None) -> None:
        """Never raises: arq's poll loop collects finished tasks' results."""
        job_id = job_id_b.decode()
        try:
            if data is None:
                ended = await self._run_if_taken(job_id, heard_at, placed)
            else:
                ended = await self._run_while_taken(job_id, data, heard_at)
        finally:
            # Its function is done: the slot goes to the next job while Redis is tidied. (At as
            # many streams as slots, a new response otherwise waits for an old one's tidying.)
            self._free_slot(job_id)
        if ended is None:
            return
        try:
            if ended:
                await asyncio.shield(self._remove(job_id))
            else:  # cancelled by a shutdown: the job stays queued for the next worker, as in arq
                await asyncio.shield(self._release(job_id))
        except REDIS_DOWN as error:
            # Left in the queue, it is delivered again and finds its response ended: a no-op.
            REDIS_LINK.failed("removing an ended job", error)

    async def _run_if_taken(self, job_id: str, heard_at: float, placed: bool) -> bool | None:
        """Takes the job and runs it (see `_run_taken`); None if it could not be taken."""
        taken = await self._taken(job_id, placed)
        if taken is None:
            return None
        data, tries = taken
        return await self._run_taken(job_id, data, tries, heard_at)

    async def _run_while_taken(self, job_id: str, data: bytes, heard_at: float) -> bool | None:
        """Runs a job heard with its data (a placed one's: its worker alone may take it until its
        placement wait ends) while the take script runs: the take's round trip is not on the way
        to what the job does. Only a job whose function makes sure it runs once by itself is sent
        so (generate: its claim in Postgres). The take goes out once the function has sent what
        it waits on first (it sets `ctx["under_way"]`; generate: its runtime request, then its
        claim), or once it ended: on two cores, a round trip sent before that request delays it.
        A take that fails (the wait ended, and another worker took the job) leaves the job's keys
        to its taker. None if it could not be taken."""
        under_way = asyncio.Event()

        async def take_once_under_way() -> tuple[bytes | None, int] | None:
            await under_way.wait()
            return await self._taken(job_id, placed=True, heard_with_data=True)

        taking = asyncio.ensure_future(take_once_under_way())
        try:
            ended = await self._run_taken(job_id, data, 1, heard_at, under_way)
        finally:
            under_way.set()
            taken = await taking  # (never raises: see `_taken`)
        return None if taken is None else ended

    async def _taken(self, job_id: str, placed: bool, heard_with_data: bool = False) -> tuple[bytes | None, int] | None:
        """The job taken (its data, None if expired or `heard_with_data`, and its try number); None
        if it could not be taken."""
        try:
            taken = await self._take(TakeOf(job_id, placed, heard_with_data))
        except REDIS_DOWN as error:
            REDIS_LINK.failed("taking a job", error)
            taken = None
        except Exception:
            log.warning("could not take job %s; it stays queued", job_id, exc_info=True)
            taken = None
        if not taken:  # running elsewhere, finished, deferred, or Redis is away: the poll retries later
            now = time.monotonic()
            self._elsewhere = {j: t for j, t in self._elsewhere.items() if t > now}
            self._elsewhere[job_id.encode()] = now + self.ELSEWHERE_SECONDS
            return None
        return taken

    async def _run_taken(
        self, job_id: str, data: bytes | None, tries: int, heard_at: float, under_way: asyncio.Event | None = None
    ) -> bool:
        """Runs a taken job's function; False when it was cancelled and must run again. Its
        context has arq's keys, when the worker went for the job and took it (Unix times:
        `heard_at`, `taken_at`), and for a job heard with its data, `under_way` (see
        `_run_while_taken`)."""
        taken_at = time.time()
        try:
            if data is None:
                raise LookupError("the job expired")
            name, args, kwargs, _, enqueued_ms = deserialize_job_raw(data, deserializer=self.job_deserializer)
            function = self.functions[name]
            max_tries = self.max_tries if function.max_tries is None else function.max_tries
            if tries > max_tries:
                raise LookupError(f"{tries - 1} tries exhausted")
            ctx = {**self.ctx, "job_id": job_id, "job_try": tries, "enqueue_time_ms": enqueued_ms}
            ctx |= {"heard_at": heard_at, "taken_at": taken_at}
            if under_way is not None:
                ctx["under_way"] = under_way
            async with asyncio.timeout(self.job_timeout_s if function.timeout_s is None else function.timeout_s):
                await function.coroutine(ctx, *args, **kwargs)
        except asyncio.CancelledError:
            self.jobs_retried += 1
            return False
        except Exception:
            log.exception("job %s failed", job_id)
            self.jobs_failed += 1
            return True
        self.jobs_complete += 1
        return True

    async def _release(self, job_id: str) -> None:
        """Due again at once, and the workers still taking jobs told so."""
        async with self.pool.pipeline(transaction=True) as pipe:
            pipe.delete(in_progress_key_prefix + job_id)
            pipe.zadd(self.queue_name, {job_id: timestamp_ms()}, xx=True)
            pipe.publish(wake_channel(self.queue_name), job_id)
            if self.placement_id is not None:
                pipe.decr(LOAD_PREFIX + self.placement_id)
            await pipe.execute()

    @property
    def _load_key(self) -> str:
        return "" if self.placement_id is None else LOAD_PREFIX + self.placement_id

    async def _take_many(self, jobs: list[TakeOf]) -> dict[TakeOf, tuple[bytes | None, int]]:
        prefixes = [in_progress_key_prefix, job_key_prefix, retry_key_prefix]
        now, timeout = timestamp_ms(), int(self.in_progress_timeout_s * 1000)
        args: list[str | int] = [now, timeout, *prefixes, self._load_key, LOAD_TTL_SECONDS]
        for job in jobs:
            args += [job.job_id, 2 if job.heard_with_data else int(job.placed)]
        asked = {job.job_id: job for job in jobs}
        return {
            asked[job_id_b.decode()]: (data, tries)
            for job_id_b, data, tries in await self._take_script(keys=[self.queue_name], args=args)
        }

    async def _remove_many(self, job_ids: list[str]) -> dict[str, None]:
        prefixes = [in_progress_key_prefix, retry_key_prefix, job_key_prefix]
        await self._remove_script(keys=[self.queue_name], args=[*prefixes, self._load_key, *job_ids])
        return {}

    def handle_sig_wait_for_completion(self, signum: signal.Signals) -> None:
        """SIGTERM: no new job, then (`on_drain`) either the running jobs are cancelled at once, for
        their generations to be handed over to another worker, or arq's wait for them to finish
        (`job_completion_wait`) before it cancels them."""
        self.allow_pick_jobs = False
        self.loop.create_task(self._drain(signal.Signals(signum)))

    async def _drain(self, signum: signal.Signals) -> None:
        try:
            hand_over = await self.on_drain()
        except Exception:
            log.warning("could not tell whether another worker takes over; finishing here", exc_info=True)
            hand_over = False
        if hand_over:
            log.info("shutting down: another worker takes this worker's generations over")
            self._job_completion_wait = 0
        await self._wait_for_tasks_to_complete(signum=signum)

    async def _until_redis_answers(self) -> None:
        """(Without a pool of its own, arq's main makes one, with arq's retries.)"""
        backoff = Backoff()
        while self._pool is not None:
            try:
                await self.pool.ping()
            except REDIS_DOWN as error:
                REDIS_LINK.failed("worker startup", error)
                await asyncio.sleep(backoff.next())
            else:
                REDIS_LINK.answered()
                return

    async def close(self) -> None:
        """arq's close, save that Redis being away leaves the health-check key to expire: arq
        would raise before `on_shutdown`, which ends this worker's generations cleanly."""
        if not self._handle_signals:
            self.handle_sig(signal.SIGUSR1)
        if not self._pool:
            return
        await asyncio.gather(*self.tasks.values())
        with REDIS_LINK.tolerated("worker shutdown"):
            await self.pool.delete(self.health_check_key)
        if self.on_shutdown:
            await self.on_shutdown(self.ctx)
        await self.pool.aclose(close_connection_pool=True)
        self._pool = None

    async def _poll_iteration(self) -> None:
        """arq's poll, riding out Redis outages: arq lets the error end its main loop, and with it
        the worker process. arq reads the queue only while a slot is free: a poll with every slot
        busy asks Redis nothing, so it says nothing of whether Redis is back."""
        asks_redis = self.allow_pick_jobs and self.job_counter < self.max_jobs
        try:
            await super()._poll_iteration()
        except REDIS_DOWN as error:
            REDIS_LINK.failed("queue poll", error)
            await asyncio.sleep(self._poll_backoff.next())  # on top of the poll delay
        else:
            if asks_redis:
                REDIS_LINK.answered()
            self._poll_backoff.reset()

    async def _listen_for_wakeups(self) -> None:
        await self._started.wait()

        async def woken(job_ids: bytes) -> None:
            if self.allow_pick_jobs:
                await self.start_jobs(job_ids.split())  # the message names the jobs

        await listen_for_ever(self.pool, wake_channel(self.queue_name), woken)

    async def _listen_for_placed(self) -> None:
        """Jobs placed on this worker: started at once while it has free slots, the others handed
        on to every worker (a full engine's turn would wait behind its queue)."""
        await self._started.wait()
        assert self.placement_id is not None

        async def placed(message: bytes) -> None:
            # The jobs' ids, or one job's id and its data (see _ENQUEUE).
            job_id, _, data = message.partition(b"\n")
            ids = message.split() if not data else [job_id]
            free = max(0, self.max_jobs - self.job_counter) if self.allow_pick_jobs else 0
            if free:
                await self.start_jobs(ids[:free], placed=True, data=data or None)
            if ids[free:]:
                PLACEMENTS.labels("handed_on").inc(len(ids[free:]))
                with REDIS_LINK.tolerated("handing placed jobs on"):  # (else they are due when the wait ends)
                    await self._hand_on_script(
                        keys=[self.queue_name], args=[timestamp_ms(), in_progress_key_prefix, *ids[free:]]
                    )
                    await self.pool.publish(wake_channel(self.queue_name), b" ".join(ids[free:]))

        await listen_for_ever(self.pool, placed_channel(self.queue_name, self.placement_id), placed)

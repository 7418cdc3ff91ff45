"""bench/first_token_trace.py reads ftrace's text as the kernel writes it: each step of an answer's
way found where it happened, and each process's time on a core counted within the answer only."""

from __future__ import annotations

import pytest

from bench.first_token_trace import FIRST_TOKEN, START, answers, parse, summary

CLIENT, API, WORKER, RUNTIME = 100, 200, 300, 400
NAMED = {CLIENT: "client", API: "api", WORKER: "worker", RUNTIME: "runtime"}


def line(comm: str, pid: int, cpu: int, at_us: int, what: str) -> str:
    return f"{comm:>16}-{pid:<7} [{cpu:03d}] d..2. {10 + at_us / 1e6:12.6f}: {what}"


def switch(cpu: int, at_us: int, prev: tuple[str, int], nxt: tuple[str, int]) -> str:
    return line(
        prev[0], prev[1], cpu, at_us,
        f"sched_switch: prev_comm={prev[0]} prev_pid={prev[1]} prev_prio=120 prev_state=S ==> "
        f"next_comm={nxt[0]} next_pid={nxt[1]} next_prio=120",
    )  # fmt: skip


def wakes(comm: str, pid: int, cpu: int, at_us: int, woken: tuple[str, int]) -> str:
    return line(comm, pid, cpu, at_us, f"sched_waking: comm={woken[0]} pid={woken[1]} prio=120 target_cpu=000")


def sends(comm: str, pid: int, cpu: int, at_us: int, size: int) -> str:
    return line(comm, pid, cpu, at_us, f"sys_sendto(fd: 7, buff: 0x1, len: {size:#x}, flags: 0, addr: 0, addr_len: 0)")


IDLE = ("swapper/0", 0)
PY_CLIENT, PY_API, PY_WORKER, PY_RUNTIME = ("python", CLIENT), ("python", API), ("python", WORKER), ("python", RUNTIME)
PG_INSERT, PG_COMMIT, REDIS = ("postgres", 501), ("postgres", 502), ("redis-server", 600)

ONE_ANSWER = [
    switch(0, -50, IDLE, PY_CLIENT),  # the client on core 0 before the answer: counted from its mark
    switch(1, -80, ("kworker/1:1", 50), ("swapper/1", 0)),  # core 1 idle since before the answer
    line("python", CLIENT, 0, 0, f"tracing_mark_write: {START}"),
    sends("python", CLIENT, 0, 100, 400),
    wakes("python", CLIENT, 0, 110, PY_API),
    switch(0, 200, PY_CLIENT, PY_API),
    sends("python", API, 0, 1200, 2100),
    wakes("python", API, 0, 1210, PG_INSERT),
    switch(0, 1220, PY_API, PG_INSERT),
    switch(0, 2000, PG_INSERT, PY_API),
    line("python", API, 0, 2100, "sys_writev(fd: 0xb, vec: 0x7ffec5b24860, vlen: 1)"),
    wakes("python", API, 0, 2110, REDIS),
    switch(0, 2200, PY_API, REDIS),
    wakes("redis-server", 600, 0, 2300, PY_WORKER),
    switch(1, 2350, IDLE, PY_WORKER),
    switch(0, 2400, REDIS, IDLE),
    sends("python", WORKER, 1, 2900, 320),
    wakes("python", WORKER, 1, 2910, PY_RUNTIME),
    switch(0, 2950, IDLE, PY_RUNTIME),
    switch(1, 3000, PY_WORKER, IDLE),
    sends("python", RUNTIME, 0, 3800, 150),
    wakes("python", RUNTIME, 0, 3810, PY_WORKER),
    switch(1, 3850, IDLE, PY_WORKER),
    switch(0, 3900, PY_RUNTIME, IDLE),
    sends("python", WORKER, 1, 4000, 200),  # a claim or a lookup: too small to be the commit
    sends("python", WORKER, 1, 4400, 2500),
    wakes("python", WORKER, 1, 4410, PG_COMMIT),
    switch(1, 4420, PY_WORKER, PG_COMMIT),
    wakes("postgres", 502, 1, 5300, PY_WORKER),
    switch(1, 5310, PG_COMMIT, PY_WORKER),
    wakes("python", WORKER, 1, 5400, REDIS),
    switch(0, 5450, IDLE, REDIS),
    wakes("redis-server", 600, 0, 5500, PY_API),
    switch(0, 5550, REDIS, PY_API),
    sends("python", API, 0, 5700, 2800),
    wakes("python", API, 0, 5710, PY_CLIENT),
    switch(1, 5720, PY_WORKER, IDLE),
    switch(0, 5750, PY_API, PY_CLIENT),
    line("python", CLIENT, 0, 5900, f"tracing_mark_write: {FIRST_TOKEN}"),
    switch(0, 6000, PY_CLIENT, PY_API),  # after the answer: not counted
    "# a header line, and one of an event this reader does not know, are passed over",
    line("python", API, 0, 6100, "sched_stat_runtime: comm=python pid=200 runtime=1000"),
]


def test_each_step_is_found_where_it_happened() -> None:
    (answer,) = answers(parse(ONE_ANSWER, NAMED))
    steps = {step: None if at is None else round(at * 1e6) for step, at in answer.milestones().items()}
    assert steps == {
        "api runs": 200,
        "insert sent": 1210,
        "enqueue sent": 2110,
        "worker runs": 2350,
        "runtime request sent": 2910,
        "runtime answers": 3800,
        "worker runs on the answer": 3850,
        "first commit sent": 4400,
        "first token sent": 5700,
        "client has it": 5900,
    }
    assert answer.ttft == pytest.approx(5900e-6)


def test_time_on_a_core_is_counted_within_the_answer_only() -> None:
    (answer,) = answers(parse(ONE_ANSWER, NAMED))
    on_cpu = {who: round(seconds * 1e6) for who, seconds in answer.on_cpu.items()}
    assert on_cpu == {
        "client": 200 + (5900 - 5750),  # from its mark (not from -50), and after the API's send
        "api": (1220 - 200) + (2200 - 2000) + (5750 - 5550),
        "postgres:501": 2000 - 1220,
        "postgres:502": 5310 - 4420,
        "redis-server": (2400 - 2200) + (5550 - 5450),
        "worker": (3000 - 2350) + (4420 - 3850) + (5720 - 5310),
        "runtime": 3900 - 2950,
        "idle": (2350 - 0) + (2950 - 2400) + (3850 - 3000) + (5450 - 3900) + (5900 - 5720),
    }


def test_a_step_not_seen_is_none_and_the_medians_skip_it() -> None:
    without_the_runtime = [text for text in ONE_ANSWER if "pid=400" not in text and f"-{RUNTIME} " not in text]
    found = answers(parse(without_the_runtime + ONE_ANSWER, NAMED))
    assert [a.milestones()["runtime request sent"] is None for a in found] == [True, False]
    medians = summary(found)["milestones_p50_us"]
    assert isinstance(medians, dict)
    assert medians["runtime request sent"] == 2910  # the one answer that has it
    assert medians["api runs"] == 200


def test_postgres_backends_are_named_by_what_they_ran_and_the_rest_are_others() -> None:
    pg_claim, pg_wal, mosquitto = ("postgres", 503), ("postgres", 700), ("mosquitto", 800)
    claim_sent = ONE_ANSWER.index(sends("python", WORKER, 1, 4000, 200))
    beside_the_claim = [
        switch(0, 4000, IDLE, pg_wal),  # woken by no process on the path
        wakes("python", WORKER, 1, 4005, pg_claim),
        switch(0, 4100, pg_wal, pg_claim),
        switch(0, 4200, pg_claim, mosquitto),
        switch(0, 4250, mosquitto, IDLE),
    ]
    trace = ONE_ANSWER[: claim_sent + 1] + beside_the_claim + ONE_ANSWER[claim_sent + 1 :]
    (answer,) = answers(parse(trace, NAMED))
    on_cpu = {who: round(seconds * 1e6) for who, seconds in answer.on_cpu_by_role().items()}
    assert on_cpu == {
        "client": 350,
        "api": 1420,
        "worker": 1630,
        "runtime": 950,
        "redis-server": 300,
        "postgres: the insert": 780,
        "postgres: the claim": 100,
        "postgres: the first commit": 890,
        "postgres: others": 100,
        "others": 50,
        "idle": 5480 - 250,
    }

"""A first token's way through every process, as the kernel's scheduler saw it.

    python bench/first_token_trace.py [--answers 30] [--gap 0] [--out FILE]

Needs root and the kernel's tracefs (mounted at /sys/kernel/tracing here if it is not). Starts
the stack (bench/stack.py) with the fake runtime, warms it up, then has ftrace record, while
`--answers` streamed answers are asked for one at a time (`--gap` seconds from one's end to the
next request), each 64 tokens one every 20 ms as in the stream benchmark, every process's
switches onto and off a core, its wake-ups of others and its socket sends, and the client's
marks at its request and at its first token. From them, for each answer: when the API first ran,
when it sent the insert (a send that woke Postgres) and the enqueue (one that woke Redis), when
the worker first ran after Redis woke it, sent the runtime request, ran again on the runtime's
answer and sent the first commit (its first send of over 1 kB to Postgres), and when the API
sent the client its first token; and each process's time on a core within the answer. Prints the
medians; `--out` keeps them with every answer's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import running_stack
from bench.stream_benchmark import fake_answer_script

TRACEFS = Path("/sys/kernel/tracing")
SENDS = ("sendto", "sendmsg", "write", "writev")
EVENTS = ("sched/sched_switch", "sched/sched_waking", *(f"syscalls/sys_enter_{call}" for call in SENDS))
START, FIRST_TOKEN = "first-token-trace: request", "first-token-trace: first token"
ON_THE_PATH = ("client", "api", "worker", "runtime", "redis-server", "idle")
COMMIT_BYTES = 1000  # a first commit carries the opening events: more than any claim or lookup

_LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>[\d.]+):\s+(?P<kind>\w+)(?P<rest>.*)$"
)
_NEXT = re.compile(r"next_comm=(?P<comm>.*?) next_pid=(?P<pid>\d+)")
_WOKEN = re.compile(r"comm=(?P<comm>.*?) pid=(?P<pid>\d+)")
_LENGTH = re.compile(r"(?:len|count): (0x[0-9a-f]+)")


@dataclass(frozen=True)
class Event:
    at: float  # seconds, the trace's clock
    who: str  # the process it happened in (for a switch, the one switched to)
    cpu: int
    kind: str  # "mark", "on_cpu", "wakes", "send"
    detail: str = ""  # the mark's text, the process woken
    size: int = 0  # a send's bytes


def process_name(pid: int, comm: str, named: dict[int, str]) -> str:
    if pid in named:
        return named[pid]
    if pid == 0:
        return "idle"
    if comm.startswith("postgres"):
        return f"postgres:{pid}"
    return comm.split("/")[0].split(":")[0]


def parse(lines: Iterable[str], named: dict[int, str]) -> Iterator[Event]:
    """The events of ftrace's text output; `named`: pid → the name its process goes by."""
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        at, cpu, kind, rest = float(m["ts"]), int(m["cpu"]), m["kind"], m["rest"]
        who = process_name(int(m["pid"]), m["comm"], named)
        if kind == "tracing_mark_write":
            yield Event(at, who, cpu, "mark", rest.lstrip(": ").strip())
        elif kind == "sched_switch" and (to := _NEXT.search(rest)):
            yield Event(at, process_name(int(to["pid"]), to["comm"], named), cpu, "on_cpu")
        elif kind == "sched_waking" and (woken := _WOKEN.search(rest)):
            yield Event(at, who, cpu, "wakes", process_name(int(woken["pid"]), woken["comm"], named))
        elif kind.removeprefix("sys_") in SENDS and rest.startswith("("):
            length = _LENGTH.search(rest)  # (writev's is in its vector)
            yield Event(at, who, cpu, "send", size=int(length[1], 16) if length else 0)


@dataclass
class Answer:
    events: list[Event]  # from the client's request to its first token
    on_cpu: defaultdict[str, float]  # seconds each process spent on a core meanwhile

    @property
    def started(self) -> float:
        return self.events[0].at

    @property
    def ttft(self) -> float:
        return self.events[-1].at - self.started

    def milestones(self) -> dict[str, float | None]:
        """Seconds from the request to each step of the way, None where it was not seen."""
        found: dict[str, float | None] = {}

        def first(after: float | None, test: Callable[[Event], bool]) -> float | None:
            if after is None:
                return None
            return next((e.at for e in self.events if e.at >= after and test(e)), None)

        def woke(sender: str, target: str, after: float | None) -> float | None:
            return first(after, lambda e: e.kind == "wakes" and e.who == sender and e.detail.startswith(target))

        found["api runs"] = first(self.started, lambda e: e.kind == "on_cpu" and e.who == "api")
        found["insert sent"] = woke("api", "postgres", found["api runs"])
        found["enqueue sent"] = woke("api", "redis", found["api runs"])
        worker_woken = woke("redis-server", "worker", found["enqueue sent"])
        found["worker runs"] = first(worker_woken, lambda e: e.kind == "on_cpu" and e.who == "worker")
        found["runtime request sent"] = woke("worker", "runtime", found["worker runs"])
        answered = found["runtime answers"] = first(
            found["runtime request sent"], lambda e: e.kind == "send" and e.who == "runtime"
        )
        on_answer = found["worker runs on the answer"] = first(
            answered, lambda e: e.kind == "on_cpu" and e.who == "worker"
        )
        committing = found["first commit sent"] = first(
            on_answer, lambda e: e.kind == "send" and e.who == "worker" and e.size > COMMIT_BYTES
        )
        api_sends = [e.at for e in self.events if e.kind == "send" and e.who == "api" and e.at > (committing or 1e18)]
        found["first token sent"] = api_sends[-1] if api_sends else None
        found["client has it"] = self.events[-1].at
        return {step: None if at is None else at - self.started for step, at in found.items()}

    def on_cpu_by_role(self) -> dict[str, float]:
        """`on_cpu` with Postgres's backends named by what they ran (the API's insert, the
        worker's claim, its first commit), and the processes outside the path as "others"."""
        roles: dict[str, str] = {}
        committing = self.milestones()["first commit sent"]
        for event in self.events:
            if event.kind != "wakes" or not event.detail.startswith("postgres:") or event.detail in roles:
                continue
            if event.who == "api":
                roles[event.detail] = "postgres: the insert"
            elif event.who == "worker":
                after_commit = committing is not None and event.at >= self.started + committing
                roles[event.detail] = "postgres: the first commit" if after_commit else "postgres: the claim"
        named: defaultdict[str, float] = defaultdict(float)
        for who, seconds in self.on_cpu.items():
            if who.startswith("postgres:"):
                named[roles.get(who, "postgres: others")] += seconds
            else:
                named[who if who in ON_THE_PATH else "others"] += seconds
        return dict(named)


def answers(events: Iterable[Event]) -> list[Answer]:
    """Each answer's events and its processes' time on a core, between the client's two marks."""
    found: list[Answer] = []
    running: dict[int, tuple[str, float]] = {}  # cpu → (process, since)
    current: Answer | None = None
    for event in events:
        if event.kind == "on_cpu":
            before = running.get(event.cpu)
            if current is not None and before is not None:
                current.on_cpu[before[0]] += event.at - max(before[1], current.started)
            running[event.cpu] = (event.who, event.at)
        if event.kind == "mark" and event.detail == START:
            current = Answer([event], defaultdict(float))
            continue
        if current is None:
            continue
        current.events.append(event)
        if event.kind == "mark" and event.detail == FIRST_TOKEN:
            for who, since in running.values():
                current.on_cpu[who] += event.at - max(since, current.started)
            found.append(current)
            current = None
    return found


def summary(found: list[Answer]) -> dict[str, object]:
    def median_us(values: Iterable[float | None]) -> float | None:
        seen = [v for v in values if v is not None]
        return round(statistics.median(seen) * 1e6) if seen else None

    steps = [answer.milestones() for answer in found]
    used = [answer.on_cpu_by_role() for answer in found]
    on_cpu = {who: median_us(u.get(who, 0.0) for u in used) for who in sorted({who for u in used for who in u})}
    return {
        "answers": len(found),
        "ttft_p50_ms": round(statistics.median(answer.ttft for answer in found) * 1000, 2),
        "milestones_p50_us": {step: median_us(s[step] for s in steps) for step in steps[0]},
        "on_cpu_p50_us": dict(sorted(on_cpu.items(), key=lambda kv: -(kv[1] or 0))),
        "each_answer": [
            {
                "ttft_us": round(answer.ttft * 1e6),
                "milestones_us": {k: None if v is None else round(v * 1e6) for k, v in s.items()},
                "on_cpu_us": {k: round(v * 1e6) for k, v in sorted(u.items(), key=lambda kv: -kv[1])},
            }
            for answer, s, u in zip(found, steps, used, strict=True)
        ],
    }


class Tracing:
    """ftrace switched on for EVENTS while in use (`text` reads it, before the exit)."""

    def __enter__(self) -> Tracing:
        if not (TRACEFS / "trace").exists():
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
        self._write("tracing_on", "0")
        self._write("trace", "")
        self._buffer_kb = (TRACEFS / "buffer_size_kb").read_text().split()[0]  # (given back on exit)
        self._write("buffer_size_kb", "32768")
        for event in EVENTS:
            self._write(f"events/{event}/enable", "1")
        self._write("tracing_on", "1")
        self.marker = (TRACEFS / "trace_marker").open("w")
        return self

    def __exit__(self, *_: object) -> None:
        self.marker.close()
        self._write("tracing_on", "0")
        for event in EVENTS:
            self._write(f"events/{event}/enable", "0")
        self._write("trace", "")
        self._write("buffer_size_kb", self._buffer_kb)

    def mark(self, text: str) -> None:
        self.marker.write(text + "\n")
        self.marker.flush()

    def text(self) -> str:
        return (TRACEFS / "trace").read_text()

    @staticmethod
    def _write(name: str, value: str) -> None:
        (TRACEFS / name).write_text(value)


async def one_answer(
    client: aiohttp.ClientSession, url: str, body: dict[str, object], headers: dict[str, str], tracing: Tracing | None
) -> None:
    """Asks for one answer and reads it to its end, marking its request and its first token."""
    first = False
    if tracing:
        tracing.mark(START)
    async with client.post(url, json=body, headers=headers) as answer:
        async for line in answer.content:
            if not first and b"output_text.delta" in line:
                first = True
                if tracing:
                    tracing.mark(FIRST_TOKEN)
    if not first:
        raise RuntimeError("the answer had no text")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=30)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds from one answer's end to the next request")
    parser.add_argument("--out", type=Path, help="a JSON file for the medians and every answer's own")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("ftrace needs root")
    # As bench/stream_benchmark.py asks: a first token that comes alone, not with the answer's end.
    body = {
        "model": "fake",
        "input": fake_answer_script(),
        "stream": True,
        "stream_options": {"include_obfuscation": False},
    }
    async with running_stack(max_output_tokens=64) as stack, aiohttp.ClientSession() as client:
        url = f"{stack.api_url}/responses"
        for _ in range(5):  # warming up
            await one_answer(client, url, body, stack.headers, None)
        with Tracing() as tracing:
            for _ in range(args.answers):
                time.sleep(args.gap)  # (blocking: the client's loop sleeps as the others do)
                await one_answer(client, url, body, stack.headers, tracing)
            text = tracing.text()
        named = {stack.pids["api"]: "api", stack.pids["worker"]: "worker", stack.pids["fake_runtime"]: "runtime"}
        named[os.getpid()] = "client"
    result = summary(answers(parse(text.splitlines(), named)))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "each_answer"}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

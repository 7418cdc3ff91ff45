"""A PostgreSQL cluster of one's own, from the machine's PostgreSQL binaries, in a temporary
directory on a free port: for what must not touch the shared server (a test that restarts it, a
benchmark that reads the WAL only it writes). As root, its commands run as the `postgres` user,
since the server refuses root."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port, wait_until

PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)


def _run(*command: str) -> None:
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # No pipes: a started server would hold them open and the call would never return.
    subprocess.run([*as_user, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass(frozen=True)
class Cluster:
    port: int
    _ctl: tuple[str, ...]
    data: Path

    def wal_records(self, start: int, end: int) -> str:
        """pg_waldump's statistics, by kind of record, of the WAL between two LSNs."""
        start_at, end_at = (f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}" for lsn in (start, end))
        pg_wal = str(self.data / "pg_wal")
        command = [f"{PG_BIN}/pg_waldump", "--stats=record", "-p", pg_wal, "-s", start_at, "-e", end_at]
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*as_user, *command], capture_output=True, text=True, check=False).stdout

    def url(self, database: str = "postgres", driver: str = "postgresql") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        _run(f"{PG_BIN}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)

    def restart(self, while_down: Callable[[], None] | None = None) -> None:
        """Stops and starts the server, running `while_down` between the two."""
        if while_down is None:
            _run(*self._ctl, "-m", "fast", "restart")
            return
        _run(*self._ctl, "-m", "fast", "stop")
        try:
            while_down()
        finally:
            _run(*self._ctl, "start")

    def value(self, sql: str) -> str:
        """The one value a query answers, as psql prints it."""
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        command = [f"{PG_BIN}/psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-tAc", sql]
        return subprocess.run([*as_user, *command], capture_output=True, text=True, check=True).stdout.strip()

    def kill(self) -> None:
        """Stops the server as a crash would: at once, without a checkpoint."""
        _run(*self._ctl, "-m", "immediate", "stop")

    def promote(self) -> None:
        """Makes a standby the primary."""
        _run(f"{PG_BIN}/pg_ctl", "-D", str(self.data), "-w", "promote")


def _check_binaries() -> None:
    if PG_BIN is None or (os.geteuid() == 0 and shutil.which("runuser") is None):
        raise RuntimeError("needs PostgreSQL's server binaries under /usr/lib/postgresql (and runuser, as root)")


def _data_folder(base: Path, name: str) -> Path:
    data = base / name
    data.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    return data


def _control(data: Path, port: int) -> tuple[str, ...]:
    server_options = f"-p {port} -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=300"
    return (f"{PG_BIN}/pg_ctl", "-D", str(data), "-w", "-o", server_options, "-l", str(data / "log"))


def _stop_all(base: Path, clusters: list[Cluster]) -> None:
    for cluster in clusters:
        subprocess.run(
            [
                *(["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []),
                *cluster._ctl,
                "-m",
                "immediate",
                "stop",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,  # (one killed by its test is stopped already)
        )
    shutil.rmtree(base, ignore_errors=True)


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    _check_binaries()
    base = Path(tempfile.mkdtemp(prefix="rs-pg-"))  # (pytest's tmp_path is closed to other users)
    base.chmod(0o755)
    data = _data_folder(base, "pgdata")
    port = free_port()
    _run(f"{PG_BIN}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
    cluster = Cluster(port, _control(data, port), data)
    _run(*cluster._ctl, "start")
    try:
        yield cluster
    finally:
        _stop_all(base, [cluster])


STANDBY_NAME = "standby1"


@contextmanager
def replicated_pair(synchronous: bool = True) -> Iterator[tuple[Cluster, Cluster]]:
    """A primary and a standby streaming from it (made by pg_basebackup), on free ports; with
    `synchronous`, the primary's commits wait for the standby to have them (synchronous_commit
    on, the standby named in synchronous_standby_names)."""
    _check_binaries()
    base = Path(tempfile.mkdtemp(prefix="rs-pg-pair-"))
    base.chmod(0o755)
    primary_data, standby_data = _data_folder(base, "primary"), _data_folder(base, "standby")
    primary_port, standby_port = free_port(), free_port()
    _run(f"{PG_BIN}/initdb", "-D", str(primary_data), "-A", "trust", "-U", "postgres")
    with (primary_data / "postgresql.conf").open("a") as conf:
        conf.write("wal_level = replica\nmax_wal_senders = 5\n")
    with (primary_data / "pg_hba.conf").open("a") as hba:
        hba.write("host replication postgres 127.0.0.1/32 trust\n")
    primary = Cluster(primary_port, _control(primary_data, primary_port), primary_data)
    _run(*primary._ctl, "start")
    clusters = [primary]
    try:
        source = f"host=127.0.0.1 port={primary_port} user=postgres application_name={STANDBY_NAME}"
        _run(f"{PG_BIN}/pg_basebackup", "-D", str(standby_data), "-R", "-X", "stream", "-d", source)
        standby = Cluster(standby_port, _control(standby_data, standby_port), standby_data)
        _run(*standby._ctl, "start")
        clusters.append(standby)
        if synchronous:  # set on the primary only once copied: a promoted standby waits for no one
            with (primary_data / "postgresql.conf").open("a") as conf:
                conf.write(f"synchronous_standby_names = '{STANDBY_NAME}'\nsynchronous_commit = on\n")
            _run(f"{PG_BIN}/pg_ctl", "-D", str(primary_data), "reload")
            wait_until(lambda: primary.value("SELECT sync_state FROM pg_stat_replication") == "sync")
        yield primary, standby
    finally:
        _stop_all(base, clusters)

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

from tests.conftest import free_port

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


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    if PG_BIN is None or (os.geteuid() == 0 and shutil.which("runuser") is None):
        raise RuntimeError("needs PostgreSQL's server binaries under /usr/lib/postgresql (and runuser, as root)")
    base = Path(tempfile.mkdtemp(prefix="rs-pg-"))  # (pytest's tmp_path is closed to other users)
    base.chmod(0o755)
    data = base / "pgdata"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    port = free_port()
    _run(f"{PG_BIN}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
    server_options = f"-p {port} -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=300"
    ctl = (f"{PG_BIN}/pg_ctl", "-D", str(data), "-w", "-o", server_options, "-l", str(data / "log"))
    _run(*ctl, "start")
    try:
        yield Cluster(port, ctl, data)
    finally:
        _run(*ctl, "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)

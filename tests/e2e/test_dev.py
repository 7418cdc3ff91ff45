"""`responses-server dev` from a clean data folder: everything comes up with no configuration,
the README's example runs against it, Ctrl-C stops every process, and the next start finds the
data of the first."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import openai

from tests.conftest import ROOT, free_port, wait_until

README_EXAMPLE_URL = "http://127.0.0.1:8000/v1"
README_EXAMPLE_KEY = "sk-rs-…"


class Dev:
    def __init__(self, data: Path, port: int, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "RESPONSES_MODELS")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "dev", "--data", str(data), "--port", str(port)],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's foreground job is
            stderr=log.open("ab"),  # the API's, the workers' and the model server's logs too
        )
        self.printed: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:  # the welcome ends with the key
            self.printed.append(line)
            if line.startswith("API key: "):
                break
        assert self.printed and self.printed[-1].startswith("API key: "), "".join(self.printed)
        self.key = self.printed[-1].removeprefix("API key: ").strip()
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def descendants(self) -> set[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
                except (OSError, IndexError):
                    continue
                children.setdefault(parent, []).append(int(entry.name))
        found, todo = set(), [self.process.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.add(child)
                todo.append(child)
        return found

    def interrupt(self) -> int:
        """Ctrl-C in a terminal: SIGINT to every process of the foreground group."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(90)


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    example: str = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    return example


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_dev_runs_everything_from_an_empty_folder_and_keeps_the_data(tmp_path: Path) -> None:
    data, port, log = tmp_path / "data", free_port(), tmp_path / "dev.log"
    dev = Dev(data, port, log)
    try:
        welcome = "".join(dev.printed)
        assert f'OpenAI(base_url="{dev.base_url}", api_key="{dev.key}")' in welcome
        example = readme_example()
        assert README_EXAMPLE_URL in example and README_EXAMPLE_KEY in example
        example = example.replace(README_EXAMPLE_URL, dev.base_url).replace(README_EXAMPLE_KEY, dev.key)
        ran = subprocess.run(
            [sys.executable, "-c", example],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip()  # the model said something
        # The console is on, and the operator key it printed opens it.
        console = re.search(r"Console: (http://\S+/console) \(operator key: (rs-op-\S+)\)", welcome)
        assert console is not None, welcome
        login = httpx.post(f"{console[1]}/login", data={"key": console[2]}, follow_redirects=False)
        assert login.status_code == 303 and "rs_console" in login.cookies

        client = openai.OpenAI(base_url=dev.base_url, api_key=dev.key, max_retries=0, timeout=60)
        kept = client.responses.create(model="smollm2", input="Remember this.", max_output_tokens=16)
        # Documents work too: its PostgreSQL has pgvector, its worker ingests with the embedded model.
        store = client.vector_stores.create(name="notes")
        attached = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id,
            file=("notes.txt", b"The spare key is under the blue flowerpot."),
            poll_interval_ms=200,
        )
        assert attached.status == "completed", attached.last_error
        found = client.vector_stores.search(store.id, query="Where is the key?")
        assert "blue flowerpot" in found.data[0].content[0].text
        processes = dev.descendants()
        assert len(processes) >= 4  # the API, the worker, llama.cpp's server, Valkey
        assert (data / "postgres" / "postmaster.pid").exists()  # PostgreSQL runs detached (pg_ctl)
    finally:
        code = dev.interrupt()
    assert code == 0
    assert not (data / "postgres" / "postmaster.pid").exists()
    # The API and the workers stopped before Valkey and Postgres did: no connection lost on the way.
    assert "Traceback" not in log.read_text() and "lost Redis" not in log.read_text()
    wait_until(lambda: not any(running(pid) for pid in processes), timeout=10)

    again = Dev(data, port, log)
    try:
        assert again.key == dev.key  # the data folder's keys still work
        assert console[2] in "".join(again.printed)
        client = openai.OpenAI(base_url=again.base_url, api_key=again.key, max_retries=0, timeout=60)
        assert client.responses.retrieve(kept.id).output_text == kept.output_text
    finally:
        assert again.interrupt() == 0

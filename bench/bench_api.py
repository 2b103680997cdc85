"""Submission latency through the HTTP API next to `jobs.submit` alone, in one run.

    .venv/bin/python bench/bench_api.py [--n 400] [--no-http]

Uses its own database `dj_bench_api` (recreated each run). The outbox fast path is off so
every path measures the same thing: acceptance (job + event + outbox row committed), not a
broker round trip. Paths are interleaved request by request so background load hits all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "dj_bench_api"
DB_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"

ENV = {
    "DATABASE_URL": DB_URL,
    "DJANGO_SETTINGS_MODULE": "jobsite.settings",
    "OUTBOX_FAST_PATH": "0",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/6",
    "JOBS_THROTTLE_USER": "off",
    "JOBS_THROTTLE_TENANT": "off",
    "LOG_LEVEL": "WARNING",
    "PYTHONPATH": str(ROOT),
}


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(
        host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def start_gunicorn(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "jobsite.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            "1",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env={**os.environ, **ENV},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("gunicorn did not start listening within 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="submissions per path")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--no-http", action="store_true", help="skip the gunicorn path")
    args = parser.parse_args()

    os.environ.update(ENV)
    sys.path.insert(0, str(ROOT))
    recreate_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from rest_framework.authtoken.models import Token

    import jobs
    from jobs.models import Job, Tenant

    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="bench")
    tenant = Tenant.objects.create(name="bench")
    tenant.members.add(user)
    token = Token.objects.create(user=user).key
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")

    http: Any = None
    gunicorn = None
    if not args.no_http:
        import requests

        port = free_port()
        gunicorn = start_gunicorn(port)
        http = requests.Session()
        http.headers["Authorization"] = f"Token {token}"
        base = f"http://127.0.0.1:{port}"

    counter = iter(range(10**9))

    def via_submit() -> None:
        i = next(counter)
        jobs.submit(
            kind="noop", input={"n": i}, owner=user, tenant=tenant, idempotency_key=f"s-{i}"
        )

    def via_client() -> None:
        i = next(counter)
        response = client.post(
            "/api/jobs/",
            data=json.dumps({"kind": "noop", "input": {"n": i}}),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=f"c-{i}",
        )
        assert response.status_code == 202, response.content

    def via_http() -> None:
        i = next(counter)
        response = http.post(
            f"{base}/api/jobs/",
            json={"kind": "noop", "input": {"n": i}},
            headers={"Idempotency-Key": f"h-{i}"},
            timeout=30,
        )
        assert response.status_code == 202, response.text

    def via_replay() -> None:
        response = client.post(
            "/api/jobs/",
            data=json.dumps({"kind": "noop", "input": {"n": -1}}),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="replay",
        )
        assert response.status_code == 202, response.content

    paths: dict[str, Callable[[], None]] = {
        "jobs.submit() alone": via_submit,
        "API, Django test Client": via_client,
        "API replay (same key)": via_replay,
    }
    if http is not None:
        paths["API, HTTP to gunicorn (1 sync worker)"] = via_http
    samples: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for _ in range(args.warmup):
            for fn in paths.values():
                fn()
        for _ in range(args.n):
            for name, fn in paths.items():
                began = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - began) * 1000)
    finally:
        if gunicorn is not None:
            gunicorn.terminate()
            gunicorn.wait(timeout=30)

    print(
        f"\nSubmission latency, n={args.n} per path (ms), database {DB_NAME}, "
        f"fast path off, {os.cpu_count()} CPUs"
    )
    print(f"{'path':<40} {'p50':>8} {'p99':>8} {'mean':>8} {'max':>8}")
    for name, values in samples.items():
        print(
            f"{name:<40} {percentile(values, 0.5):8.2f} {percentile(values, 0.99):8.2f} "
            f"{statistics.fmean(values):8.2f} {max(values):8.2f}"
        )
    print(f"jobs accepted: {Job.objects.count()}")


if __name__ == "__main__":
    main()

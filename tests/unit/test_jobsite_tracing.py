"""The example project's tracing switch (jobsite/tracing.py), in a fresh interpreter each:
the global tracer provider is set once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "from jobsite.tracing import configure_tracing\n"
    "from outbox import tracing\n"
    "print(configure_tracing('probe'), tracing.enabled())\n"
)


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_no_otlp_endpoint__nothing_configured_and_tracing_stays_off() -> None:
    assert _probe() == "False False"


def test_an_otlp_endpoint__the_sdk_is_the_provider_and_tracing_is_on() -> None:
    # Nothing listens there; no span is made, so nothing is exported.
    assert _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9") == "True True"

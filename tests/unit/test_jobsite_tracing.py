"""The example project's tracing switch (jobsite/tracing.py), in a fresh interpreter each:
the global tracer provider is set once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys\n"
    "if sys.argv[1:] == ['no-sdk']:\n"
    "    sys.modules['opentelemetry.sdk'] = None  # import fails as without the extra\n"
    "from jobsite.tracing import configure_tracing\n"
    "from outbox import tracing\n"
    "print(configure_tracing('probe'), tracing.enabled())\n"
)


def _probe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_no_otlp_endpoint__nothing_configured_and_tracing_stays_off() -> None:
    assert _probe().stdout.strip() == "False False"


def test_an_otlp_endpoint__the_sdk_is_the_provider_and_tracing_is_on() -> None:
    # Nothing listens there; no span is made, so nothing is exported.
    # Needs the [otel] extra, which `make setup` and every nox session install.
    assert _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9").stdout.strip() == "True True"


def test_an_otlp_endpoint_without_the_extra__a_warning_and_tracing_stays_off() -> None:
    done = _probe("no-sdk", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert done.stdout.strip() == "False False"
    assert "the [otel] extra is missing" in done.stderr

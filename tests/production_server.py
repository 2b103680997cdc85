"""The production web server for tests: the Dockerfile's command and environment, on a free
port of 127.0.0.1, against the test database.

The image's CMD and ENV are read from the Dockerfile (only the bind address and the paths
change), so the tests exercise what `docker run` starts: gunicorn with uvicorn workers,
DJANGO_ENV=production, static files collected with the production storage and served by
WhiteNoise. `tls=True` serves HTTPS itself (a throw-away self-signed certificate), for a
browser that must see Secure cookies and HSTS as behind the real proxy; without it the
client plays the TLS proxy and sends `X-Forwarded-Proto: https` (DJANGO_PROXY_SSL_HEADER,
as compose.yaml sets it).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.harness import (
    DRILL_MODULE,
    ROOT,
    Harness,
    Proc,
    free_port,
    handler_modules,
    wait_until,
)

DOCKERFILE = ROOT / "Dockerfile"
# What compose.yaml's `proxy` sends; the app trusts it through DJANGO_PROXY_SSL_HEADER.
PROXY_HEADERS = {"X-Forwarded-Proto": "https"}


def dockerfile_cmd() -> list[str]:
    (line,) = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("CMD ")]
    return list(json.loads(line.removeprefix("CMD ")))


def dockerfile_env() -> dict[str, str]:
    """The image's ENV (the `ENV A=1 \\ B=2` form)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return env


def production_env(base: dict[str, str], static_root: Path, **extra: str) -> dict[str, str]:
    # The browser tests allow the ORM in their own event loop; the server must not inherit it.
    base = {k: v for k, v in base.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    # A production process refuses the drill kinds (demo.apps); the image names none.
    modules = [m for m in handler_modules(base) if m != DRILL_MODULE]
    base["JOBS_HANDLER_MODULES"] = ",".join(modules)
    return {
        **base,
        **dockerfile_env(),
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_STATIC_ROOT": str(static_root),
        "DJANGO_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        "WEB_ACCESS_LOG": "0",
        **extra,
    }


def collect_static(static_root: Path) -> None:
    """`manage.py collectstatic` as the Dockerfile runs it (production storage: hashed,
    compressed, with a manifest)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=production_env(base, static_root),
        check=True,
        capture_output=True,
        timeout=180,
    )


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass
class ProductionServer:
    proc: Proc
    port: int
    cert: Path | None

    @property
    def url(self) -> str:
        return f"{'https' if self.cert else 'http'}://127.0.0.1:{self.port}"

    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        if self.cert is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        context = ssl.create_default_context(cafile=str(self.cert))
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=context)

    def get(
        self, path: str, headers: dict[str, str] | None = None, timeout: float = 10.0
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers with lower-case names, body), through the proxy's header."""
        conn = self.connection(timeout)
        try:
            conn.request("GET", path, headers={**PROXY_HEADERS, **(headers or {})})
            response = conn.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            return response.status, headers, response.read()
        finally:
            conn.close()

    def healthy(self) -> bool:
        try:
            return self.get("/healthz", timeout=2)[0] == 200
        except OSError:
            return False


@contextlib.contextmanager
def production_server(
    harness: Harness, static_root: Path, *, tls: bool = False, **env_extra: str
) -> Iterator[ProductionServer]:
    """The image's CMD with its bind address moved to 127.0.0.1:<free port>."""
    port = free_port()
    argv = dockerfile_cmd()
    argv[argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    argv[0] = str(Path(sys.executable).with_name(argv[0]))  # the venv's gunicorn
    cert = None
    if tls:
        cert, key = self_signed_certificate(harness.workdir)
        argv[1:1] = ["--certfile", str(cert), "--keyfile", str(key)]
    env = production_env(
        harness.base_env(), static_root, JOBS_MEDIA_ROOT=str(harness.media_root), **env_extra
    )
    proc = harness.spawn("web", argv, env)
    server = ProductionServer(proc=proc, port=port, cert=cert)
    try:
        wait_until(lambda: server.healthy() or not proc.alive(), timeout=60, what="the web server")
        assert proc.alive(), f"the web server died:\n{proc.log()[-3000:]}"
        yield server
    finally:
        proc.stop(timeout=10)

"""An https receiver: the sender connects to the checked address but speaks TLS to the URL's
name (SNI, certificate verification, Host header); a certificate for another name fails."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

import jobs
from jobs.callbacks import transport
from jobs.callbacks.delivery import callbacks_send_due
from jobs.models import CallbackDelivery
from tests.callback_receiver import callback_receiver

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]

SECRET = "whsec_" + base64.b64encode(b"tls-callback-secret-of-32-bytes!").decode()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificates(tmp: Path, name: str) -> tuple[Path, Path, Path]:
    """(CA certificate, a leaf certificate for `name` it signed, the leaf's key)."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=callback test CA", cwd=tmp)  # fmt: skip
    _openssl("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", f"/CN={name}",
             cwd=tmp)  # fmt: skip
    (tmp / "ext").write_text(f"subjectAltName=DNS:{name}\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext",
             cwd=tmp)  # fmt: skip
    return tmp / "ca.pem", tmp / "leaf.pem", tmp / "leaf.key"


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.JOBS_CALLBACK_SECRETS = {"": SECRET}
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # localhost's ::1 stays refused
    settings.JOBS_CALLBACK_TIMEOUT = 5.0


def server_context(leaf: Path, key: Path, seen: list[str | None]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf, key)
    context.sni_callback = lambda sock, name, ctx: seen.append(name)
    return context


@pytest.mark.parametrize(("certified", "delivered"), [("localhost", True), ("other.test", False)])
def test_https_receiver__tls_for_the_name_at_the_pinned_address(
    user: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certified: str, delivered: bool
) -> None:
    ca, leaf, key = certificates(tmp_path, certified)
    trusting = ssl.create_default_context(cafile=str(ca))
    monkeypatch.setattr(transport._PinnedTLSConnection, "context", trusting)
    seen: list[str | None] = []
    with callback_receiver(tls=server_context(leaf, key, seen)) as receiver:
        url = f"https://localhost:{receiver.port}/hook"
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=url)
        jobs.execute(job.pk)
        callbacks_send_due()
        delivery = CallbackDelivery.objects.get(job=job)
        assert seen and seen[0] == "localhost"  # SNI: the name, not 127.0.0.1
        if delivered:
            assert delivery.status == "delivered"
            [request] = receiver.requests()
            assert request.headers["host"] == f"localhost:{receiver.port}"
        else:
            assert delivery.status == "pending"  # a retry: the certificate may be fixed
            assert delivery.last_error.startswith("retry after tls:")
            assert receiver.requests() == []

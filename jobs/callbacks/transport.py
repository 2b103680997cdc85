"""One callback request: a POST to the very address that passed the destination check.

The standard library's http.client, with `connect` pinned to the checked address (the Host
header, TLS SNI and certificate verification still use the URL's name), no redirects followed
(http.client follows none), bounded everywhere: a short connect timeout, a socket timeout,
and a deadline for the whole attempt that `abort()` enforces from outside by shutting the
socket (a receiver dripping one byte at a time cannot hold a sender longer). Only the status
code is kept; at most BODY_READ_CAP bytes of the answer are read.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from .destination import RefusedDestination, destination_resolve

BODY_READ_CAP = 4096
CONNECT_TIMEOUT_MAX = 3.0
USER_AGENT = "durable-jobs-callbacks/1"


class SendFailed(Exception):
    """The attempt got no HTTP answer; `label` says why in a few words, no secret in it."""

    def __init__(self, label: str, *, refused: bool = False) -> None:
        super().__init__(label)
        self.label = label
        self.refused = refused  # the destination is not allowed: retrying cannot help


@dataclass(frozen=True)
class Answer:
    status_code: int
    address: str


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP connection to `address` for the URL's `host`."""

    def __init__(
        self, host: str, port: int, *, address: str, timeout: float, connect_timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.connect_timeout = connect_timeout
        self.on_socket: list[socket.socket] = []

    def _tcp(self) -> socket.socket:
        sock = socket.create_connection((self.address, self.port), self.connect_timeout)
        self.on_socket.append(sock)
        sock.settimeout(self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connect(self) -> None:
        self.sock = self._tcp()


class _PinnedTLSConnection(_PinnedConnection):
    default_port = 443
    context = ssl.create_default_context()

    def connect(self) -> None:
        # SNI and certificate verification for the URL's name, not the address.
        self.sock = self.context.wrap_socket(self._tcp(), server_hostname=self.host)


class CallbackRequest:
    """One attempt; `send()` in a worker thread, `abort()` from another at the deadline."""

    def __init__(self, url: str, *, headers: dict[str, str], body: bytes, timeout: float) -> None:
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self._lock = threading.Lock()
        self._aborted = False
        self._connection: _PinnedConnection | None = None
        self.elapsed = 0.0  # seconds the last send() took, resolve to answer

    def abort(self) -> None:
        """Unblock a send still running: its socket is shut, its next read fails."""
        with self._lock:
            self._aborted = True
            connection = self._connection
        if connection is not None:
            for sock in connection.on_socket:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def send(self) -> Answer:
        """POST the body; the receiver's status code, or SendFailed."""
        started = time.monotonic()
        try:
            return self._send()
        finally:
            self.elapsed = time.monotonic() - started

    def _send(self) -> Answer:
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        tls = parts.scheme.lower() == "https"
        port = parts.port or (443 if tls else 80)
        try:
            address = destination_resolve(host, port)
        except RefusedDestination as exc:
            raise SendFailed(f"refused destination: {exc}", refused=True) from None
        except ConnectionError as exc:
            raise SendFailed(str(exc)) from None
        kind = _PinnedTLSConnection if tls else _PinnedConnection
        connection = kind(
            host,
            port,
            address=address,
            timeout=self.timeout,
            connect_timeout=min(self.timeout, CONNECT_TIMEOUT_MAX),
        )
        with self._lock:
            if self._aborted:
                raise SendFailed("timed out")
            self._connection = connection
        try:
            return Answer(self._exchange(connection), address)
        except SendFailed:
            raise
        except ssl.SSLError as exc:
            raise SendFailed(f"tls: {exc.reason or exc}") from None
        except TimeoutError:
            raise SendFailed("timed out") from None
        except (OSError, http.client.HTTPException) as exc:
            if self._aborted:
                raise SendFailed("timed out") from None
            raise SendFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
        finally:
            connection.close()

    def _exchange(self, connection: _PinnedConnection) -> int:
        target = urlsplit(self.url)
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Connection": "close",
        }
        connection.request("POST", path, body=self.body, headers=headers)
        response = connection.getresponse()
        response.read(BODY_READ_CAP)
        return int(response.status)


def send_within_deadline(requests: list[CallbackRequest]) -> list[Answer | SendFailed]:
    """Send every request at once (one thread each, no database access in them); a request
    still running at its deadline is aborted. Answers in the order of `requests`."""
    results: list[Answer | SendFailed] = [SendFailed("timed out")] * len(requests)

    def run(index: int, request: CallbackRequest) -> None:
        try:
            results[index] = request.send()
        except SendFailed as exc:
            results[index] = exc
        except Exception as exc:  # never lose an attempt's record to a surprise
            results[index] = SendFailed(f"{type(exc).__name__}: {exc}"[:300])

    threads = [
        threading.Thread(target=run, args=(i, r), name="jobs-callback", daemon=True)
        for i, r in enumerate(requests)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread, request in zip(threads, requests, strict=True):
        thread.join(max(request.timeout - (time.monotonic() - started), 0.0))
        if thread.is_alive():
            request.abort()
            thread.join(CONNECT_TIMEOUT_MAX)
    return list(results)  # a straggler that still answers later changes nothing

"""A real HTTP receiver of completion callbacks on 127.0.0.1, in a thread of the test.

It records every request (headers, body, time), answers with the next scripted status
(200 once the script is spent), and can hold a request until released (a receiver that
takes its time: a sender killed meanwhile).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    path: str

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = 0
    script: list[int] = field(default_factory=list)  # status codes to answer, in order
    hold: threading.Event | None = None  # set: answer; unset: keep the request waiting
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/jobs?src=test"

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def ids(self) -> list[str]:
        return [r.webhook_id for r in self.requests()]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.received.append(
                    Received(
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.time(),
                        self.path,
                    )
                )
                status = receiver.script.pop(0) if receiver.script else 200
            if receiver.hold is not None:
                receiver.hold.wait(60)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def callback_receiver(*, tls: ssl.SSLContext | None = None, **options: Any) -> Iterator[Receiver]:
    """A receiver; with `tls`, an https one (the context holds its certificate)."""
    receiver = Receiver(**options)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        server.shutdown()
        server.server_close()

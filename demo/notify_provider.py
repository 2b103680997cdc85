"""A small notification provider for local runs, drills and tests (a real HTTP server).

POST /notify with header Idempotency-Key: the first request of a key creates a notice; later
ones get the same notice back with `replayed: true`. Every request is recorded.
GET /stats: `requests_by_key` (every recorded request) and what the provider holds: `notices`
(how many) and `notices_by_key` (per key; never more than one, so a retry under the same key is
one logical send). POST /control: change behaviour, e.g. {"timeout_after_accept": 1} (the next
N new notices are recorded, then the answer stalls past the client's timeout), {"capacity": 2}
(more concurrent requests answer 429), {"fail_next": 2} (answer 503 without recording),
{"reset": true}.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ProviderState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests: dict[str, int] = {}
        self.notices: dict[str, dict[str, Any]] = {}
        self.timeout_after_accept = 0
        self.stall_seconds = 10.0
        self.fail_next = 0
        self.capacity = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.rejected_for_capacity = 0
        self.total_requests = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "total_requests": self.total_requests,
            "requests_by_key": dict(self.requests),
            "notices": len(self.notices),
            "notices_by_key": dict.fromkeys(self.notices, 1),
            "duplicate_sends": sum(1 for n in self.requests.values() if n > 1),
            "max_in_flight": self.max_in_flight,
            "rejected_for_capacity": self.rejected_for_capacity,
        }


class ProviderHandler(BaseHTTPRequestHandler):
    state: ProviderState
    work_seconds: float = 0.0

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            parsed = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def do_GET(self) -> None:
        if self.path.startswith("/stats"):
            with self.state.lock:
                self._json(200, self.state.snapshot())
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.startswith("/control"):
            self._control(self._body())
        elif self.path.startswith("/notify"):
            self._notify(self._body())
        else:
            self._json(404, {"error": "not found"})

    def _control(self, body: dict[str, Any]) -> None:
        with self.state.lock:
            if body.get("reset"):
                self.state.reset()
            for name in ("timeout_after_accept", "fail_next", "capacity"):
                if name in body:
                    setattr(self.state, name, int(body[name]))
            if "stall_seconds" in body:
                self.state.stall_seconds = float(body["stall_seconds"])
            self._json(200, self.state.snapshot())

    def _notify(self, body: dict[str, Any]) -> None:
        key = self.headers.get("Idempotency-Key", "")
        if not key:
            self._json(400, {"error": "Idempotency-Key header is required"})
            return
        state = self.state
        with state.lock:
            state.total_requests += 1
            if state.fail_next > 0:
                state.fail_next -= 1
                self._json(503, {"error": "temporarily unavailable"})
                return
            if state.capacity and state.in_flight >= state.capacity:
                state.rejected_for_capacity += 1
                self._json(429, {"error": "over capacity"})
                return
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if self.work_seconds:
                time.sleep(self.work_seconds)
            with state.lock:
                state.requests[key] = state.requests.get(key, 0) + 1
                replayed = key in state.notices
                if not replayed:
                    state.notices[key] = {
                        "notice_id": str(uuid.uuid4()),
                        "job_id": body.get("job_id"),
                    }
                notice = state.notices[key]
                stall = not replayed and state.timeout_after_accept > 0
                if stall:
                    state.timeout_after_accept -= 1
            if stall:
                time.sleep(state.stall_seconds)  # accepted, but the client gives up first
            self._json(200, {"notice_id": notice["notice_id"], "replayed": replayed})
        finally:
            with state.lock:
                state.in_flight -= 1


def provider_server(host: str, port: int, *, work_seconds: float = 0.0) -> ThreadingHTTPServer:
    handler = type(
        "BoundProviderHandler",
        (ProviderHandler,),
        {"state": ProviderState(), "work_seconds": work_seconds},
    )
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server

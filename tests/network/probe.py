"""A TCP client driven line by line over stdin, for running inside a host (`python -m ...`).

Commands (one per line): `connect ADDRESS PORT TIMEOUT`, `echo DATA TIMEOUT` (send, wait for
as many bytes back), `user_timeout MS`, `close`. Each prints one JSON line: ok, error (the
exception's class name), errno and the seconds it took, measured here inside the host.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any


def _run(sock: socket.socket | None, words: list[str]) -> tuple[socket.socket | None, Any]:
    command = words[0]
    if command == "connect":
        sock = socket.create_connection((words[1], int(words[2])), timeout=float(words[3]))
        return sock, None
    assert sock is not None, "connect first"
    if command == "echo":
        sock.settimeout(float(words[2]))
        data = words[1].encode()
        sock.sendall(data)
        got = b""
        while len(got) < len(data):
            chunk = sock.recv(len(data) - len(got))
            if not chunk:
                raise ConnectionAbortedError("eof")
            got += chunk
        return sock, got.decode()
    if command == "user_timeout":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(words[1]))
        return sock, None
    if command == "close":
        sock.close()
        return None, None
    raise ValueError(command)


def main() -> None:
    sock: socket.socket | None = None
    for line in sys.stdin:
        started = time.monotonic()
        result: dict[str, Any] = {"ok": True}
        try:
            sock, result["value"] = _run(sock, line.split())
        except Exception as error:  # the result is the point: report it, keep serving
            result = {"ok": False, "error": type(error).__name__}
            result["errno"] = getattr(error, "errno", None)
        result["seconds"] = round(time.monotonic() - started, 3)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

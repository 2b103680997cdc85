"""A TCP fault proxy in user space: latency, resets and refusals (this kernel has no netem).

One asyncio loop in a daemon thread forwards every connection to one upstream. Modes, switched
at any time from the test's thread:

- `pass_through()`: forward as is (and listen again after `refuse()`);
- `delay(ms)`: hold every chunk `ms` milliseconds in each direction, order kept;
- `reset()`: abort every open connection with an RST (SO_LINGER 0), and every new one on accept;
- `refuse()`: stop listening, so a new connection is refused by the kernel (ECONNREFUSED);
  open connections carry on.

`chunks["up"]` / `chunks["down"]` count the reads forwarded each way (client -> upstream, upstream
-> client): a client that waits for each answer sends one chunk per round trip, so the bench
(bench/slowlink.py) counts round trips with them; `observe`, when set, sees each chunk too.

A blackhole is not made here: a proxy that drops bytes still ACKs them, which is not what a
partition does to TCP. Cut the path to the proxy with `Host.blackhole()` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

CHUNK = 64 * 1024
SHUTDOWN_GRACE = 3.0  # seconds a connection's handler has to end once its pumps are cancelled


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Listens on (host, port) and forwards to `upstream`; see the module docstring."""

    def __init__(self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0):
        self.upstream = upstream
        self.host, self.port = host, port
        self.delay_seconds = 0.0
        self.resetting = False
        self.accepted = 0
        self.chunks = {"up": 0, "down": 0}
        # (direction, connection number, data) for each chunk, on the proxy's thread
        self.observe: Callable[[str, int, bytes], None] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()  # one per accepted connection

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._forward(reader, writer)
        finally:
            self._handlers.discard(handler)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        number = self.accepted
        if self.resetting:
            _abort_with_rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort_with_rst(writer)
            return
        if self.resetting:  # reset() came while the upstream connect was under way
            _abort_with_rst(writer)
            up_writer.close()
            return
        self._open.update((writer, up_writer))
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, "up", number)),
            asyncio.ensure_future(self._pump(up_reader, writer, "down", number)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for end in (writer, up_writer):
                self._open.discard(end)
                end.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: str = "up",
        number: int = 0,
    ) -> None:
        """Copy one direction, each chunk held until its due time (ordered, so FIFO is right)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    return
                writer.write(data)
                await writer.drain()

        delivering = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(CHUNK):
                self.chunks[direction] += 1
                if self.observe is not None:
                    self.observe(direction, number, data)
                await queue.put((loop.time() + self.delay_seconds, data))
            await queue.put((loop.time() + self.delay_seconds, b""))
            await delivering
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            delivering.cancel()

    async def _reset_open(self) -> None:
        for end in list(self._open):
            _abort_with_rst(end)
        self._open.clear()

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def pass_through(self) -> None:
        self.delay_seconds, self.resetting = 0.0, False
        self._call(self._listen())

    def delay(self, milliseconds: float) -> None:
        """Add `milliseconds` in each direction (a round trip gains twice that)."""
        self.delay_seconds, self.resetting = milliseconds / 1000, False
        self._call(self._listen())

    def reset(self) -> None:
        self.resetting = True
        self._call(self._reset_open())

    def refuse(self) -> None:
        self._call(self._stop_listening())

    async def _shutdown(self) -> None:
        self.resetting = True  # a connection accepted from now on is aborted by its handler
        await self._stop_listening()
        await self._reset_open()
        # Until none is left: a connection accepted just before the listener closed starts
        # its task after a first look (a task still pending at loop.stop is an error here).
        # The pumps are cancelled, and each connection's handler then ends by itself: a
        # cancelled handler is logged by asyncio.streams as "Exception in callback ...
        # CancelledError" (its done callback asks a cancelled task for its exception), so a
        # handler is cancelled only if it has not ended within SHUTDOWN_GRACE.
        while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            for task in tasks:
                if task not in self._handlers:
                    task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await asyncio.sleep(0)

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def fault_proxy(
    upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, host=host, port=port).start()
    try:
        yield proxy
    finally:
        proxy.close()

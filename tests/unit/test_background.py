"""outbox.background: one pattern for a process's background threads (start on first use,
forgotten in a forked child, flushed at exit, stopped cleanly)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from outbox.background import Background, PerProcess


class _Counter(Background):
    """Counts the items it is given in its thread; flush() counts the rest in the caller."""

    thread_name = "test-counter"

    def __init__(self) -> None:
        super().__init__()
        self.queued = 0
        self.counted = 0
        self.flushed_by: list[str] = []

    def give(self, n: int) -> None:
        with self.cond:
            self.queued += n
            self.ensure_thread()
            self.cond.notify_all()

    def run(self) -> None:
        with self.cond:
            while not self.stopping:
                self.counted += self.queued
                self.queued = 0
                self.cond.notify_all()
                self.cond.wait()

    def flush(self) -> int:
        with self.cond:
            self.counted += self.queued
            self.queued = 0
            self.flushed_by.append(threading.current_thread().name)
            return self.counted


def test_thread_starts_on_first_use_only_and_stop_ends_it() -> None:
    holder = PerProcess(_Counter)
    assert holder.current() is None, "current() never makes a service"
    service = holder()
    assert holder() is service
    assert service.thread is None, "no work given: no thread"

    service.give(3)
    thread = service.thread
    assert thread is not None and thread.name == "test-counter"
    with service.cond:
        assert service.cond.wait_for(lambda: service.counted == 3, 5)

    service.stop()
    assert not thread.is_alive()
    assert service.flushed_by == [threading.current_thread().name]

    service.give(2)  # a new thread after a stop
    assert service.thread is not thread and service.thread is not None
    with service.cond:
        assert service.cond.wait_for(lambda: service.counted == 5, 5)
    service.stop()
    holder.forget()
    assert holder.current() is None


def test_forked_child__forgets_the_parents_service_and_makes_its_own() -> None:
    calls: list[str] = []
    holder = PerProcess(_Counter, after_fork=lambda: calls.append("after_fork"))
    parent = holder()
    parent.give(1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            before = holder.current()
            child = holder()
            child.give(4)
            with child.cond:
                ok = child.cond.wait_for(lambda: child.counted == 4, 5)
            child.stop()
            report = f"{before is None} {child is not parent} {ok} {calls}"
            os.write(write, report.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == "True True True ['after_fork']"
    assert holder.current() is parent, "the parent keeps its own"
    parent.stop()


def test_flush_at_exit__a_normal_exit_does_what_the_thread_held(tmp_path: Path) -> None:
    out = tmp_path / "flushed"
    script = textwrap.dedent(
        f"""
        import threading
        from outbox.background import Background, PerProcess

        class Held(Background):
            def __init__(self):
                super().__init__()
                self.items = []

            def run(self):  # never gets to publish: the process exits first
                with self.cond:
                    self.cond.wait_for(lambda: self.stopping)

            def flush(self):
                with open({str(out)!r}, "w") as f:
                    f.write(",".join(self.items))

        holder = PerProcess(Held, flush_at_exit=True)
        held = holder()
        with held.cond:
            held.items += ["a", "b"]
            held.ensure_thread()
        """
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "a,b"

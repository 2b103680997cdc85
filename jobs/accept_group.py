"""Single submits that arrive together share one commit: group commit for the accept.

A plain submit (no idempotency key, business key, `after` or admission rule; outside any
transaction) that finds no other thread of its process writing one commits alone, at once: its
rows in one statement, as `job_submit` always wrote them. When another thread is writing, it
queues its request and waits (at most WAIT_SECONDS; then it leaves the queue and writes
alone, as before). As soon as the writer is done, the first waiting thread takes
the queued requests (up to `JOBS_ACCEPT_GROUP_MAX`) and writes them column-wise (jobs.bulk,
as `submit_many` does) in one statement: one round trip and one commit for the group, its
outbox rows published by one call after it, by the thread that wrote it. Each thread returns
its own job once that commit is done, so a 202 still means committed. That is PostgreSQL's
own group commit, and the fast path's publisher (outbox.fastpath), applied to the accept:
nobody waits when alone.

A group's failure is nobody else's: if its statement fails, nothing of it was written, and
each of its requests is written again alone by its own thread, which then meets its own error,
if any (a related row deleted meanwhile, the database gone). A failure after the commit (the
publish) leaves the jobs accepted and returned; their rows wait for the relay.

Not grouped: submits with tracing on (a job's root span is a child of its own thread's span),
and any submit inside the caller's transaction (its rows commit with the caller's data).
A process that dies while writing a group dies with every thread waiting on it. Before the
commit nothing of the group was written and nobody was answered; after it all of it was, and
the other threads may have answered already (they are woken at the commit, before the
publish): the rows wait for the relay, as a lone submit's do when its process dies there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from outbox.background import Background, PerProcess
from outbox.models import OutboxEntry
from outbox.services import outbox_after_commit_many

from . import bulk, tracing
from .conf import jobs_settings
from .models import Job
from .rows import CheckedSubmit

logger = logging.getLogger(__name__)

# A queued request waits this long behind the write in progress (a commit takes milliseconds),
# then leaves the queue and is written alone: one write stuck on a lock (a related row locked
# by another transaction) never holds the process's other submits for longer.
WAIT_SECONDS = 0.1


@dataclass(eq=False)
class _Request:
    checked: CheckedSubmit
    job: Job | None = None
    alone: bool = False  # its group was not written: its own thread writes it alone
    done: bool = False


class _Accepts(Background):
    """One process's plain accepts: whether one is being written, and the queue behind it (a
    service of the process without a thread of its own: outbox.background)."""

    thread_name = "accept-group"

    def __init__(self) -> None:
        super().__init__()
        self.writing = False
        self.queue: list[_Request] = []

    def accept(self, checked: CheckedSubmit, alone: Callable[[CheckedSubmit], Job]) -> Job:
        request = _Request(checked)
        with self.cond:
            first = not self.writing and not self.queue
            if first:
                self.writing = True
            else:
                self.queue.append(request)
        if first:
            try:
                return alone(checked)
            finally:
                self._release()
        while (group := self._lead_or_wait(request)) is not None:
            self._write(group)
        return alone(checked) if request.alone else _written(request)

    def _lead_or_wait(self, request: _Request) -> list[_Request] | None:
        """The next group to write, when this thread is to write it; None once `request` was
        written, or is to be written alone: its group failed, or the write it waited behind
        took longer than WAIT_SECONDS (a request still queued then leaves the queue)."""
        deadline = time.monotonic() + WAIT_SECONDS
        with self.cond:
            while not request.done and self.writing:
                left = deadline - time.monotonic()
                if left <= 0 and request in self.queue:
                    self.queue.remove(request)
                    request.alone = request.done = True
                    break
                self.cond.wait(left if left > 0 else None)
            if request.done:
                return None
            self.writing = True
            most = jobs_settings.ACCEPT_GROUP_MAX
            group, self.queue = self.queue[:most], self.queue[most:]
            return group

    def _write(self, group: list[_Request]) -> None:
        """Write `group` in one statement (its own transaction), or give each request back
        to be written alone; then publish its rows (the others are on their way by then)."""
        entries: list[OutboxEntry] = []
        try:
            if len(group) > 1:
                jobs, entries = bulk.jobs_insert_plain_statement([r.checked for r in group])
                for request, job in zip(group, jobs, strict=True):
                    request.job = job
        except Exception:
            logger.info(
                "accept group of %d not written; each is written alone", len(group), exc_info=True
            )
        finally:
            with self.cond:
                for request in group:
                    request.alone = request.job is None
                    request.done = True
                self.writing = False
                self.cond.notify_all()
        if entries:
            try:
                outbox_after_commit_many(entries)
            except Exception:  # committed: the relay publishes them once reserved rows lapse
                logger.exception("accept group: publishing after the commit failed")

    def _release(self) -> None:
        with self.cond:
            self.writing = False
            self.cond.notify_all()


def _written(request: _Request) -> Job:
    assert request.job is not None
    return request.job


# A forked child starts with its own: the parent's waiting threads did not survive the fork.
_accepts = PerProcess(_Accepts)


def groupable() -> bool:
    """May a plain submit of this thread share a commit?"""
    return (
        jobs_settings.ACCEPT_GROUP_MAX > 1
        and not connection.in_atomic_block
        and not tracing.enabled()
    )


def accept_plain(checked: CheckedSubmit, alone: Callable[[CheckedSubmit], Job]) -> Job:
    """Accept a plain, checked request: written by `alone(checked)` when no other plain
    accept of the process is being written, else in a group (module docstring)."""
    return _accepts().accept(checked, alone)

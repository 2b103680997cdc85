"""Exceptions a task result names for failures that are not the task's own exception.

`TaskResult.errors[i].exception_class` imports these by path, so they live here for good.
"""

from __future__ import annotations

from jobs.exceptions import PermanentError


class WorkerLost(Exception):
    """The worker running an attempt died or stalled past its lease; another attempt followed
    (or the attempt budget was spent)."""


class JobCancelled(Exception):
    """The job was cancelled: on request, or superseded by a newer input version."""


class ReturnValueNotJSON(PermanentError, TypeError):
    """The task returned a value that does not survive a JSON round trip: no retry can fix it,
    so the job is quarantined at once. A TypeError, as Django's own backends raise."""

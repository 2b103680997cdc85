"""`GET /api/jobs/<id>/?wait=SECONDS` as an async view: a waiting client holds no thread and
no database connection while it sleeps.

1. The first read is JobDetailView, run in a thread (authentication, permission, throttles,
   the caller's current visibility, the serialized status); it answers at once.
2. If the job has not finished and `wait` is left, the coroutine sleeps
   JOBS_API_POLL_INTERVAL, its connections given back first (to the pool, or closed,
   exactly as at the end of a request; kept when they are persistent, as under WSGI).
3. Each read in between authenticates the token or session again, checks the view's
   permissions and reads the job's state through the caller's current visibility: a revoked
   token, a deactivated user or a member removed from the tenant ends the wait at once. It
   reads the state and the progress's `updated_at` and serializes nothing (about a third of
   the CPU of a full read).
4. When a read sees another status, newer progress (ctx.progress), no job, or refused
   credentials, or at the deadline, the answer is JobDetailView run again (no throttle
   charge): its status, 401 or 404, as a plain GET would answer at that moment. A client
   that hangs up cancels the coroutine.

Under a WSGI server Django runs this view through async_to_sync: the same answers, one
worker held for the wait, as before.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import auth
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponseBase
from django.utils.functional import SimpleLazyObject
from rest_framework.exceptions import APIException

from jobs.conf import jobs_settings
from jobs.selectors import jobs_visible_to
from jobs.states import CLIENT_STATUS, JobState

from .selectors import uuid_or_none
from .views import JobDetailView

SyncView = Callable[..., HttpResponseBase]


def release_connections() -> None:
    """What Django does at the end of a request: close (or return to the pool) connections
    that are not to be kept; never one inside a transaction (a test's, an atomic caller's)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _forget_credentials(request: HttpRequest) -> None:
    """The next read loads the session and the user from the database again."""
    if hasattr(request, "session"):
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(request.session.session_key)
    if hasattr(request, "user"):
        request.user = SimpleLazyObject(functools.partial(auth.get_user, request))  # type: ignore[assignment]


def _read(view: SyncView, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
    try:
        return view(request, *args, **kwargs)
    finally:
        release_connections()


def _reread(view: SyncView, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
    _forget_credentials(request)
    return _read(view, request, *args, **kwargs)


def _seen(response: HttpResponseBase) -> tuple[Any, Any]:
    """What a wait watches in an answer: the status and when the progress was reported."""
    data = getattr(response, "data", {})
    progress = data.get("progress")
    return data.get("status"), progress.get("updated_at") if isinstance(progress, dict) else None


def _unchanged(request: HttpRequest, job_id: str, seen: tuple[Any, Any]) -> bool:
    """One read between answers (step 3): True while the caller may still see the job and
    its client status and progress are still those `seen`."""
    _forget_credentials(request)
    view = JobDetailView(rereading=True)
    try:
        drf_request = view.initialize_request(request)
        view.request = drf_request
        view.perform_authentication(drf_request)
        view.check_permissions(drf_request)
        pk = uuid_or_none(job_id)
        visible = jobs_visible_to(drf_request.user)
        row = (
            visible.filter(pk=pk).values_list("state", "progress__updated_at").first()
            if pk
            else None
        )
    except APIException:
        return False
    finally:
        release_connections()
    if row is None:
        return False
    state, progress_at = row
    return (CLIENT_STATUS[JobState(state)].value, progress_at) == seen


def job_detail_view() -> Callable[..., Any]:
    """The URL's view: JobDetailView's answer, waited for asynchronously."""
    first = JobDetailView.as_view(wait_outside=True)
    again = JobDetailView.as_view(wait_outside=True, rereading=True)

    @functools.wraps(first)  # cls, initkwargs, csrf_exempt: the schema and CSRF see the view
    async def job_detail(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = await sync_to_async(_read)(first, request, *args, **kwargs)
        wait = float(getattr(response, "long_poll_seconds", 0.0))
        if wait <= 0:
            return response
        seen = _seen(response)
        deadline = time.monotonic() + wait
        interval = float(jobs_settings.API_POLL_INTERVAL)
        while (remaining := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(interval, remaining))
            if not await sync_to_async(_unchanged)(request, kwargs["job_id"], seen):
                break
        return await sync_to_async(_reread)(again, request, *args, **kwargs)

    # Only reads: never inside ATOMIC_REQUESTS' transaction (which async views cannot have).
    for alias in connections:
        job_detail = transaction.non_atomic_requests(using=alias)(job_detail)
    return job_detail


job_detail = job_detail_view()

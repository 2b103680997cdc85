"""A task's function run by a worker: Django's calling convention inside our lease.

The kind's handler (KindSpec.fn) reads the task's result as it stands (RUNNING, this attempt's
claim counted), sends `task_started`, calls the function with the stored arguments (and a
DurableTaskContext when `takes_context=True`), and returns `{"return_value": ...}` after its
JSON round trip. An exception raised by the function is classified like any handler's
(jobs.retry): TransientError and unclassified errors (a `sys.exit()` too, as Django's
immediate backend counts it: jobs.runtime.call_handler) are retried within the budget,
PermanentError is quarantined at once. `task_finished` is sent once a final outcome
(succeeded, quarantined, cancelled) committed; a retry is not a finish.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.tasks import Task
from django.tasks.signals import task_finished, task_started

from .context import DurableTaskContext
from .errors import ReturnValueNotJSON
from .results import RETURN_VALUE, task_result_read

if TYPE_CHECKING:
    from collections.abc import Callable

    from jobs.context import JobContext
    from jobs.leases import Lease
    from jobs.outcomes import Outcome
    from jobs.registry import HandlerFn


def json_round_trip(value: Any) -> Any:
    """`value` as it comes back from JSON (tuples become lists); TypeError or ValueError for
    what JSON cannot carry, as `json.dumps` raises them (Django's documented errors)."""
    return json.loads(json.dumps(value, allow_nan=False))


def task_call(task: Task[Any, Any], job: JobContext, input: dict[str, Any]) -> Any:
    """Run the task's function once, under the job's lease; its JSON return value."""
    args, kwargs = list(input.get("args", [])), dict(input.get("kwargs", {}))
    result = task_result_read(job.job_id, task)
    task_started.send(sender=type(task.get_backend()), task_result=result)
    if task.takes_context:
        value = task.call(DurableTaskContext(task_result=result, job=job), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    try:
        return json_round_trip(value)
    except (TypeError, ValueError) as exc:
        raise ReturnValueNotJSON(
            f"{task.module_path} returned a value JSON cannot carry: {exc}"
        ) from exc


def task_handler(task: Task[Any, Any]) -> HandlerFn:
    """The KindSpec handler of a task's kind."""

    def run(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
        return {RETURN_VALUE: task_call(task, ctx, input)}

    return run


def task_outcome_hook(task: Task[Any, Any]) -> Callable[[Lease, Outcome], None]:
    """Sends `task_finished` with the result as committed, when the outcome is final."""
    from jobs.outcomes import Outcome

    final = {Outcome.SUCCEEDED, Outcome.QUARANTINED, Outcome.CANCELLED}

    def finished(lease: Lease, outcome: Outcome) -> None:
        if outcome in final:
            result = task_result_read(lease.job_id, task)
            task_finished.send(sender=type(task.get_backend()), task_result=result)

    return finished

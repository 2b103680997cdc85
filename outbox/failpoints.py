"""Named crash points for tests: JOBS_FAILPOINTS="name=action,...". Zero cost when unset.

Actions: `exit` (os._exit(137), a crash with no cleanup), `sleep:SECONDS`, `raise`.
Each app declares its own names with `failpoints_add` (the outbox's are below, the worker's in
jobs.failpoints). The variable is read once, at import; its names are checked at the first
failpoint the process reaches, once every app has declared its own (at import, or in its
AppConfig.ready): a name no app declared stops it there with a ValueError.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable

logger = logging.getLogger(__name__)

ENV = "JOBS_FAILPOINTS"

NAMES: set[str] = set()  # every app's declared names (failpoints_add)


class FailpointTriggered(RuntimeError):
    """Raised by the `raise` action."""


def failpoints_add(names: Iterable[str]) -> None:
    """Declare an app's failpoint names (at import of the module that names them)."""
    NAMES.update(names)


def _unknown(name: str) -> ValueError:
    return ValueError(f"{ENV}: unknown failpoint {name!r} (known: {sorted(NAMES)})")


def _parse(spec: str, *, check_names: bool) -> dict[str, str]:
    actions: dict[str, str] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, action = item.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or (check_names and name not in NAMES):
            raise _unknown(name)
        if action not in {"exit", "raise"} and not action.startswith("sleep:"):
            raise ValueError(f"{ENV}: unknown action {action!r} for {name}")
        actions[name] = action
    return actions


def parse(spec: str) -> dict[str, str]:
    """`name=action,...` as {name: action}; ValueError for an undeclared name or bad action."""
    return _parse(spec, check_names=True)


# The names wait for every app's declaration (module docstring); the actions are checked now.
_active: dict[str, str] = _parse(os.environ.get(ENV, ""), check_names=False)
_names_checked = not _active


def configure(spec: str) -> None:
    """Replace the active failpoints (tests in one process)."""
    global _active, _names_checked
    _active, _names_checked = parse(spec), True


def failpoint(name: str) -> None:
    global _names_checked
    if not _active:
        return
    if not _names_checked:
        for active in _active:
            if active not in NAMES:
                raise _unknown(active)
        _names_checked = True
    action = _active.get(name)
    if action is None:
        return
    logger.warning("failpoint %s triggered: %s", name, action)
    if action == "exit":
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(137)
    if action == "raise":
        raise FailpointTriggered(name)
    time.sleep(float(action.split(":", 1)[1]))


failpoints_add(
    {
        "submit.after_commit_before_publish",
        "submit.publisher_before_publish",
        "relay.after_reserve",
        "relay.after_publish_before_mark",
    }
)

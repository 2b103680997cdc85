"""Named crash points for tests: JOBS_FAILPOINTS="name=action,...". Zero cost when unset.

Actions: `exit` (os._exit(137), a crash with no cleanup), `sleep:SECONDS`, `raise`.
"""

from __future__ import annotations

import logging
import os
import time

logger = logging.getLogger(__name__)

NAMES = frozenset(
    {
        "submit.after_commit_before_publish",
        "submit.publisher_before_publish",
        "relay.after_publish_before_mark",
        "worker.after_claim",
        "worker.batch_after_claim",
        "worker.batch_before_commit",
        "worker.after_effect_before_complete",
        "worker.after_complete_before_ack",
    }
)


class FailpointTriggered(RuntimeError):
    """Raised by the `raise` action."""


def parse(spec: str) -> dict[str, str]:
    actions: dict[str, str] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, action = item.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or name not in NAMES:
            raise ValueError(
                f"JOBS_FAILPOINTS: unknown failpoint {name!r} (known: {sorted(NAMES)})"
            )
        if action not in {"exit", "raise"} and not action.startswith("sleep:"):
            raise ValueError(f"JOBS_FAILPOINTS: unknown action {action!r} for {name}")
        actions[name] = action
    return actions


_active: dict[str, str] = parse(os.environ.get("JOBS_FAILPOINTS", ""))


def configure(spec: str) -> None:
    """Replace the active failpoints (tests in one process)."""
    global _active
    _active = parse(spec)


def failpoint(name: str) -> None:
    if not _active:
        return
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

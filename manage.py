#!/usr/bin/env python
"""Django's command-line utility for durable-jobs.

It reads var/run.env, where `make run` says its instance is, for the variables the
environment does not set (jobsite/runenv.py), so a second terminal's commands reach the same
database as the `make run` in the first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

RUN_ENV = Path(__file__).resolve().parent / "var" / "run.env"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    from jobsite.runenv import run_env_load

    loaded = run_env_load(os.environ, RUN_ENV)
    from django.core.management import execute_from_command_line
    from django.db import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except OperationalError as exc:
        if "--traceback" in sys.argv:
            raise
        sys.exit(database_unreachable(exc, loaded))


def database_unreachable(exc: Exception, loaded: tuple[Path, set[str]] | None) -> str:
    """One paragraph instead of a 50-line traceback: which database, named where, and why."""
    from jobsite.runenv import without_password

    url = without_password(os.environ.get("DATABASE_URL", "the default DATABASE_URL"))
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    where = "the environment"
    hint = "Is PostgreSQL running, and does the database exist (`make setup` creates it)?"
    if loaded is not None and "DATABASE_URL" in loaded[1]:
        where = f"{loaded[0]}, written by `make run`"
        hint = (
            "Is that `make run` still running? Start it again, or delete the file to use "
            "the defaults."
        )
    return f"error: cannot use the database {url} (from {where}): {reason}\n{hint}"


if __name__ == "__main__":
    main()

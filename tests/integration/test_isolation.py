"""The suite stays on its own servers whatever the developer's environment exports."""

from __future__ import annotations

import os
import subprocess
import sys

import redis

from tests.harness import ROOT, PrivateRedis

PUBLISHING_TEST = (
    "tests/integration/test_submit.py::"
    "test_submit_in_committed_transaction__publishes_one_message_after_commit"
)


def test_publishing_test__with_foreign_services_exported__passes_and_touches_none_of_them(
    tmp_path: object,
) -> None:
    decoy = PrivateRedis()  # "the developer's Redis": must receive nothing
    decoy.start()
    try:
        # A developer's shell: none of the suite's own variables, foreign services exported.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "JOBS_TEST"))}
        env.update(
            {
                "CELERY_BROKER_URL": f"redis://127.0.0.1:{decoy.port}/12",
                "CELERY_RESULT_BACKEND": f"redis://127.0.0.1:{decoy.port}/13",
                # Nothing listens on port 1: a suite that followed this could not even start.
                "DATABASE_URL": "postgres://postgres@127.0.0.1:1/someone_elses",
                "DJANGO_SETTINGS_MODULE": "jobsite.settings",
                "JOBS_QUEUE": "someone-elses-queue",
                "JOBS_WORKER_NAME": "someone-else",
                "OUTBOX_FAST_PATH": "0",
                "JOBS_TEST_DATABASE_NAME": f"test_dj_isolation_{os.getpid()}",
            }
        )
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", PUBLISHING_TEST],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-4000:]
        assert "1 passed" in output
        client = redis.Redis(port=decoy.port)
        try:
            assert client.info("keyspace") == {}, "the suite wrote to the developer's Redis"
        finally:
            client.close()
    finally:
        decoy.close()

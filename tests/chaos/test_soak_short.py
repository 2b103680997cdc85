"""CI's chaos soak: a few hundred jobs under every fault type, checked, in under 3 minutes;
a share of them submitted through jobs.submit_many, so batch messages meet the faults too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.faults import FAULTS
from tests.harness import ROOT

pytestmark = pytest.mark.chaos

WALL_CLOCK_BUDGET = 180.0


def test_short_soak__every_fault_type_and_every_invariant_holds(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    started = time.monotonic()
    # Its own process: the soak runs Django against a private PostgreSQL it crashes at will.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.chaos.soak",
            "--jobs",
            "300",
            "--seed",
            "6",
            "--duration",
            "55",
            "--fault-every",
            "3",
            "--workers",
            "3",
            "--drain-timeout",
            "60",
            "--outbox-retention",
            "30",
            "--report",
            str(report_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WALL_CLOCK_BUDGET + 60,
    )
    elapsed = time.monotonic() - started
    output = done.stdout[-6000:] + done.stderr[-4000:]
    assert report_path.exists(), f"the soak wrote no report (exit {done.returncode}):\n{output}"
    report = json.loads(report_path.read_text())
    check = report["check"]

    assert done.returncode == 0, output
    assert report["ok"] and check["violation_count"] == 0, check["violations"]
    assert report["accepted"] == 300
    assert set(report["faults"]) == set(FAULTS), f"faults not applied: {report['fault_log']}"
    assert (
        check["signals"]["duplicate_deliveries_total"]
        + check["signals"]["stale_writes_rejected_total"]
        > 0
    )
    recovered = check["signals"]["expired_leases_total"] + check["takeovers"]
    assert recovered > 0, "no expired lease was recovered"
    # A share went through jobs.submit_many: batch messages were claimed under the faults.
    batches = report["batches"]
    assert batches["submitted_in_batches"] > 0
    assert batches["batch_messages"] > 0 and batches["batch_claims"] > batches["batch_messages"]
    by_kind = check["by_kind"]
    sends = sum(by_kind.get(k, {}).get("succeeded", 0) for k in ("chaos.notify", "chaos.flaky"))
    assert check["notices"] == sends, "one provider notice per succeeded sending job"
    # Pruning ran under the faults (jobs after 10 s, published outbox rows after 30 s):
    # finished jobs and outbox rows went, and the checker read them from the archive.
    assert check["pruned"]["jobs_job"] > 0 and check["pruned"]["outbox_outboxentry"] > 0
    # Follow-ups met the faults: every fan-out that succeeded had its join run once.
    fanned = by_kind.get("chaos.fan_out", {}).get("succeeded", 0)
    assert fanned > 0 and by_kind.get("chaos.join", {}).get("succeeded", 0) == fanned
    assert elapsed < WALL_CLOCK_BUDGET, f"short soak took {elapsed:.0f}s"


@pytest.mark.django_db
def test_checker_flags_what_it_promises__broken_trail_unfinished_job_unledgered_send(
    user: Any,
) -> None:
    """The checker is not vacuous: rows that break each promise are each reported."""
    from django.utils import timezone

    from jobs.models import EffectLedgerEntry, Job, JobEvent
    from tests.chaos.checker import check_run

    now = timezone.now()
    done = Job.objects.create(
        kind="chaos.sleep",
        owner=user,
        request_fingerprint="x",
        state="succeeded",
        generation=3,
        attempt=2,
        result={},
        finished_at=now,
        lease_owner=None,
    )
    trail = [
        ("", "queued", 0, "accepted"),
        ("queued", "leased", 1, "claimed"),
        ("leased", "retry_wait", 1, "lease expired 1 times"),
        ("retry_wait", "leased", 3, "claimed"),  # generation 2 skipped
        ("leased", "succeeded", 3, "completed"),
        ("leased", "succeeded", 1, "completed"),  # a stale owner's second terminal write
    ]
    for from_state, to_state, generation, reason in trail:
        JobEvent.objects.create(
            job=done,
            from_state=from_state,
            to_state=to_state,
            generation=generation,
            attempt=1,
            reason=reason,
        )
    EffectLedgerEntry.objects.create(  # applied, but the provider holds nothing under its key
        job=done,
        input_version=1,
        name="notice",
        idempotency_key="job-done-notice",
        state="applied",
        generation=3,
        calls=1,
        applied_at=now,
    )
    waiting = Job.objects.create(
        kind="chaos.notify",
        owner=user,
        request_fingerprint="y",
        state="queued",
        next_attempt_at=now,
    )

    report = check_run(
        accepted={str(done.pk), str(waiting.pk)},
        expected={"chaos.sleep": {"succeeded"}},
        provider={
            "requests_by_key": {"job-unknown-notice": 1},
            "notices": 1,
            "notices_by_key": {"job-unknown-notice": 2},
        },
    )

    found = "\n".join(report.violations)
    assert "2 terminal events" in found
    assert "claim generation 3 after 1" in found
    assert "by generation 1 while generation 3 held it" in found
    assert f"job {waiting.pk} (chaos.notify) not finished: queued" in found
    assert "provider got key job-unknown-notice with no ledger row" in found
    assert "provider holds 2 notices under key job-unknown-notice" in found
    assert "provider holds a notice under key job-unknown-notice with no ledger row" in found
    assert "effect job-done-notice applied but the provider holds no notice" in found
    assert "the run tested nothing" in found
    assert not report.ok


@pytest.mark.django_db
def test_checker_flags_follow_ups__missing_child_wrong_join_and_children_of_a_failure(
    user: Any,
) -> None:
    """Rule 6 is not vacuous: a succeeded fan-out short of a child, a join that waited for
    the wrong set, a child off its parent's priority and a failed parent's child are each
    reported."""
    from django.utils import timezone

    from jobs.models import Job, JobDependency
    from tests.chaos.archive import Rows
    from tests.chaos.checker import CheckReport, _check_follow_ups

    def job(kind: str, state: str, **fields: Any) -> Any:
        return Job.objects.create(
            kind=kind,
            owner=user,
            request_fingerprint="x",
            state=state,
            finished_at=timezone.now(),
            result={} if state == "succeeded" else None,
            **fields,
        )

    parent = job("chaos.fan_out", "succeeded", input={"n": 2}, priority=50)
    child = job("chaos.notify", "succeeded", parent=parent, priority=0)
    join = job("chaos.join", "succeeded", parent=parent)
    stranger = job("chaos.notify", "succeeded")
    JobDependency.objects.create(waiter=join, dependency=stranger)
    parent.result = {"children": [str(child.pk)], "join": str(join.pk)}
    parent.save()
    failed = job("chaos.fan_out", "failed", input={"n": 1})
    job("chaos.notify", "succeeded", parent=failed)

    report = CheckReport()
    _check_follow_ups(report, list(Job.objects.all()), Rows().edges())

    found = "\n".join(report.violations)
    assert f"job {parent.pk}: 1 children, asked for 2" in found
    assert f"join {join.pk} waited for" in found
    assert f"job {child.pk}: priority 0, its parent's 50" in found
    assert f"job {failed.pk} ended failed with 1 follow-ups" in found
    assert len(report.violations) == 4


@pytest.mark.django_db
def test_checker_flags_pruning__an_active_job_an_early_prune_and_a_parent_before_its_child(
    user: Any,
) -> None:
    """Rule 7 is not vacuous, and rules 1-6 see archived rows: jobs deleted through the
    soak's archive triggers are still checked (a pruned job is not "lost")."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from jobs.models import Job
    from tests.chaos import archive
    from tests.chaos.checker import check_run

    archive.install()
    long_ago = timezone.now() - timedelta(hours=1)

    def job(state: str, finished_at: Any = None, **fields: Any) -> Any:
        return Job.objects.create(
            kind="chaos.sleep",
            owner=user,
            request_fingerprint="x",
            state=state,
            finished_at=finished_at,
            result={} if state == "succeeded" else None,
            **fields,
        )

    active = job("queued", next_attempt_at=timezone.now())
    early = job("succeeded", timezone.now())
    parent = job("succeeded", long_ago)
    child = job("succeeded", long_ago, parent=parent)
    fine = job("succeeded", long_ago)
    with connection.cursor() as cursor:  # as the pruner would, had it been wrong
        cursor.execute(
            "DELETE FROM jobs_job WHERE id = ANY(%s)",
            [[active.pk, early.pk, parent.pk, fine.pk]],
        )

    report = check_run(
        accepted={str(j.pk) for j in (active, early, parent, child, fine)},
        expected={"chaos.sleep": {"succeeded"}},
        provider=None,
        require_fences=False,
        retention=10,
    )

    found = "\n".join(report.violations)
    assert f"job {active.pk} pruned while queued" in found
    assert f"job {early.pk} pruned" in found and "before its retention" in found
    assert f"job {parent.pk} pruned while job {child.pk} still named it" in found
    assert "has no row" not in found  # archived rows are read
    # Deleted behind the pruner's back: its counter (what /metrics adds back) did not see them.
    assert "pruned_total {} is not the pruned jobs by state" in found
    assert report.pruned["jobs_job"] == 4
    assert str(fine.pk) not in found
    Job.objects.filter(pk=child.pk).delete()  # the constraints are checked at teardown

"""Follow-up jobs and fan-in (issue 27, part 4; jobs.links).

- `jobs_job.parent` (the job whose handler submitted this one; a partial index, as replay_of),
  `waiting_for` (fan-in: the dependencies not ended yet; NULL without `after`) and
  `has_waiters` (some waiter names this job). Each added without a table rewrite.
- `jobs_jobdependency`: one row per (waiter, dependency).
- The state `waiting`: the state check takes it (NOT VALID, then validated under a lock that
  lets writes go on, as 0020), and the transition guard's frozen edges (TRANSITION_PAIRS,
  which tests/unit/test_states.py compares with jobs/states.py) gain waiting -> queued and
  waiting -> cancelled.
- The trigger jobs_job_after_state (jobs/sql/jobs_job_after_state.sql, with
  jobs_dependency_ended.sql): it releases a waiting job when its last dependency ends, in
  that transaction. Its WHEN clause keeps it off every row without links: an ordinary job's
  claim, heartbeat and completion call no function of it.
"""

import django.db.models.deletion
from django.db import migrations, models

from jobs.sql import sql_file

TRANSITION_PAIRS = [
    ("leased", "cancelled"),
    ("leased", "leased"),
    ("leased", "quarantined"),
    ("leased", "retry_wait"),
    ("leased", "succeeded"),
    ("quarantined", "failed"),
    ("quarantined", "queued"),
    ("queued", "cancelled"),
    ("queued", "leased"),
    ("retry_wait", "cancelled"),
    ("retry_wait", "leased"),
    ("retry_wait", "quarantined"),
    ("waiting", "cancelled"),
    ("waiting", "queued"),
]
_EARLIER_PAIRS = [pair for pair in TRANSITION_PAIRS if pair[0] != "waiting"]  # 0002's


def _guard(pairs: list[tuple[str, str]]) -> str:
    """The transition guard of 0002, with these edges."""
    listed = ", ".join(f"('{a}', '{b}')" for a, b in pairs)
    return f"""
CREATE OR REPLACE FUNCTION jobs_job_transition_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.generation < OLD.generation THEN
        RAISE EXCEPTION 'jobs_job_generation_monotonic: job % generation % -> %',
            OLD.id, OLD.generation, NEW.generation USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN ({listed}) THEN
        RAISE EXCEPTION 'jobs_job_transition_guard: job % cannot go % -> %',
            OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""


STATES = ["cancelled", "failed", "leased", "quarantined", "queued", "retry_wait", "succeeded"]
CHECK = "jobs_job_state_valid"


def _state_check(states: list[str]) -> list[str]:
    listed = ", ".join(f"'{s}'" for s in states)
    return [
        f"ALTER TABLE jobs_job DROP CONSTRAINT IF EXISTS {CHECK};",
        f"ALTER TABLE jobs_job ADD CONSTRAINT {CHECK} CHECK (state IN ({listed})) NOT VALID;",
        f"ALTER TABLE jobs_job VALIDATE CONSTRAINT {CHECK};",
    ]


TRIGGER = """
CREATE TRIGGER jobs_job_after_state AFTER UPDATE OF state ON jobs_job FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state AND (
    OLD.state = 'waiting'
    OR (NEW.has_waiters AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
))
EXECUTE FUNCTION jobs_job_after_state();
"""
DROP_TRIGGER = """
DROP TRIGGER IF EXISTS jobs_job_after_state ON jobs_job;
DROP FUNCTION IF EXISTS jobs_job_after_state();
DROP FUNCTION IF EXISTS jobs_dependency_ended(uuid, uuid, text, boolean);
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0021_schedules")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="children",
                to="jobs.job",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_for",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="has_waiters",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent", "created_at"],
                name="jobs_job_parent_idx",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "queued"),
                    ("waiting", "waiting"),
                    ("leased", "leased"),
                    ("retry_wait", "retry wait"),
                    ("succeeded", "succeeded"),
                    ("quarantined", "quarantined"),
                    ("cancelled", "cancelled"),
                    ("failed", "failed"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    _state_check(sorted([*STATES, "waiting"])), _state_check(STATES)
                )
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name=CHECK),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("state__in", sorted([*STATES, "waiting"]))),
                        name=CHECK,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cancel_on_failure", models.BooleanField(default=False)),
                (
                    "dependency",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="waiter_links",
                        to="jobs.job",
                    ),
                ),
                (
                    "waiter",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="dependency_links",
                        to="jobs.job",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("waiter", "dependency"), name="jobs_jobdependency_unique_edge"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("waiter", models.F("dependency")), _negated=True),
                        name="jobs_jobdependency_not_self",
                    ),
                ],
            },
        ),
        migrations.RunSQL(_guard(TRANSITION_PAIRS), _guard(_EARLIER_PAIRS)),
        migrations.RunSQL(
            [sql_file("jobs_dependency_ended"), sql_file("jobs_job_after_state"), TRIGGER],
            DROP_TRIGGER,
        ),
    ]

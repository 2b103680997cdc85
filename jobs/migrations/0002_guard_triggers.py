"""Database guards that no code path can skip.

- jobs_job_transition_guard: a state change must be an edge of jobs.states.TRANSITIONS, and
  the generation (the fencing token) never goes down.
- jobs_jobevent_append_only: the event trail is never rewritten.
The edge list is frozen here; tests/unit/test_states.py fails if it drifts from states.py.
"""

from django.db import migrations

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
]

_pairs_sql = ", ".join(f"('{a}', '{b}')" for a, b in TRANSITION_PAIRS)

FORWARD = f"""
CREATE OR REPLACE FUNCTION jobs_job_transition_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.generation < OLD.generation THEN
        RAISE EXCEPTION 'jobs_job_generation_monotonic: job % generation % -> %',
            OLD.id, OLD.generation, NEW.generation USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN ({_pairs_sql}) THEN
        RAISE EXCEPTION 'jobs_job_transition_guard: job % cannot go % -> %',
            OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER jobs_job_transition_guard BEFORE UPDATE ON jobs_job
    FOR EACH ROW EXECUTE FUNCTION jobs_job_transition_guard();

CREATE OR REPLACE FUNCTION jobs_jobevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'jobs_jobevent_append_only: the event trail cannot be updated'
        USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER jobs_jobevent_append_only BEFORE UPDATE ON jobs_jobevent
    FOR EACH ROW EXECUTE FUNCTION jobs_jobevent_append_only();
"""

REVERSE = """
DROP TRIGGER IF EXISTS jobs_job_transition_guard ON jobs_job;
DROP FUNCTION IF EXISTS jobs_job_transition_guard();
DROP TRIGGER IF EXISTS jobs_jobevent_append_only ON jobs_jobevent;
DROP FUNCTION IF EXISTS jobs_jobevent_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]

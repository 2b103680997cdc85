-- jobs_dependency_ended: one of a waiting job's dependencies ended (fan-in, jobs/links.py), in
-- the transaction that ended it (the trigger jobs_job_after_state) or that wrote the waiter
-- (a dependency that had ended before: jobs.links.dependencies_record). Counts the waiter's
-- `waiting_for` down under the waiter's row lock, so of two dependencies ending at once the
-- second to take the lock sees the first's count: exactly one of them releases the waiter.
-- A dependency that did not succeed, for a waiter that asked to be cancelled then
-- (p_cancel, `after_failure="cancel"`), cancels it at once. The last one releases it:
-- waiting -> queued, due now (or at its `run_after`), its elapsed budget from then; its
-- outbox row is made due by the trigger on its own row. A waiter no longer waiting
-- (cancelled meanwhile) is left alone. Each change of state writes its JobEvent.
CREATE OR REPLACE FUNCTION jobs_dependency_ended(
    p_waiter uuid, p_dependency uuid, p_state text, p_cancel boolean
) RETURNS void LANGUAGE plpgsql
AS $$
DECLARE
    waiting_state CONSTANT text := 'waiting';
    w record;
BEGIN
    UPDATE jobs_job AS j SET waiting_for = j.waiting_for - 1
    WHERE j.id = p_waiter AND j.state = waiting_state
    RETURNING j.waiting_for, j.generation, j.attempt INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_cancel AND p_state <> 'succeeded' THEN
        UPDATE jobs_job AS j SET
            state = 'cancelled',
            finished_at = now(),
            updated_at = now(),
            error_category = 'dependency_failed',
            error_message = format('dependency %s ended %s', p_dependency, p_state)
        WHERE j.id = p_waiter;
        INSERT INTO jobs_jobevent
            (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
        VALUES (p_waiter, waiting_state, 'cancelled', w.generation, w.attempt, '', 'database',
                format('dependency ended %s', p_state),
                jsonb_build_object('dependency', p_dependency::text, 'state', p_state),
                clock_timestamp());
    ELSIF w.waiting_for = 0 THEN
        UPDATE jobs_job AS j SET
            state = 'queued',
            deadline = j.deadline + greatest(now() - j.next_attempt_at, interval '0 seconds'),
            next_attempt_at = greatest(j.next_attempt_at, now()),
            updated_at = now()
        WHERE j.id = p_waiter;
        INSERT INTO jobs_jobevent
            (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
        VALUES (p_waiter, waiting_state, 'queued', w.generation, w.attempt, '', 'database',
                'released: every dependency ended',
                jsonb_build_object('last_dependency', p_dependency::text, 'state', p_state),
                clock_timestamp());
    END IF;
END;
$$;

-- jobs_job_after_state: the trigger function of jobs_job_after_state, AFTER UPDATE OF state ON
-- jobs_job FOR EACH ROW, WHEN the state changed and the row left 'waiting' or has waiters and
-- entered a final state (migration 0022): a job without links never calls it.
--   - A waiting job released (-> queued): its dormant outbox row (due 9999-12-31, which no
--     relay sweep reaches; jobs.links.DORMANT_AT) is made due at its next_attempt_at, so the
--     relay's next sweep publishes it. Cancelled instead: the row is deleted, unpublished.
--   - A job with waiters ended (succeeded, failed, cancelled: TERMINAL of jobs/states.py; a
--     quarantined job has not ended): each waiter counts it (jobs_dependency_ended), waiters
--     in id order. A waiter released or cancelled here runs this trigger on its own row in
--     turn (a cancelled waiter's waiters count it as ended).
-- Everything in the transaction that changed the state: whatever path ended the job.
CREATE OR REPLACE FUNCTION jobs_job_after_state() RETURNS trigger LANGUAGE plpgsql
AS $$
DECLARE
    final_states CONSTANT text[] := ARRAY['succeeded', 'failed', 'cancelled'];
    waiting_state CONSTANT text := 'waiting';
    dormant CONSTANT timestamptz := '9999-12-31 00:00:00+00';
    e record;
BEGIN
    IF OLD.state = waiting_state THEN
        IF NEW.state = 'queued' THEN
            UPDATE outbox_outboxentry SET available_at = NEW.next_attempt_at
            WHERE job_id = NEW.id AND published_at IS NULL AND available_at = dormant;
        ELSE
            DELETE FROM outbox_outboxentry
            WHERE job_id = NEW.id AND published_at IS NULL AND available_at = dormant;
        END IF;
    END IF;
    IF NEW.has_waiters AND NEW.state = ANY(final_states) THEN
        FOR e IN
            SELECT d.waiter_id, d.cancel_on_failure FROM jobs_jobdependency d
            WHERE d.dependency_id = NEW.id ORDER BY d.waiter_id
        LOOP
            PERFORM jobs_dependency_ended(e.waiter_id, NEW.id, NEW.state, e.cancel_on_failure);
        END LOOP;
    END IF;
    RETURN NULL;
END;
$$;

-- jobs_callback_enqueue: a job with a callback_url entered a terminal state; queue its one
-- delivery in the same transaction (jobs.callbacks sends it). Called only by the trigger
-- below, whose WHEN clause keeps jobs without a callback_url (nearly all of them) off it:
-- for them an UPDATE of state costs one NULL test, no function call. The webhook id is the
-- stable idempotency key: the job and the event, nothing else, so every retry sends the same.
-- A terminal state is never left (jobs_job_transition_guard), so one row per job at most;
-- ON CONFLICT only guards a caller that replays a transition by hand.
CREATE OR REPLACE FUNCTION jobs_callback_enqueue() RETURNS trigger LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO jobs_callbackdelivery
        (job_id, event, webhook_id, status, attempts, next_attempt_at, claimed_by,
         last_status_code, last_error, created_at, finished_at)
    VALUES (NEW.id, NEW.state, 'job-' || NEW.id::text || '-' || NEW.state, 'pending', 0,
            now(), NULL, NULL, '', now(), NULL)
    ON CONFLICT (webhook_id) DO NOTHING;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_job_callback ON jobs_job;
CREATE TRIGGER jobs_job_callback AFTER UPDATE OF state ON jobs_job
    FOR EACH ROW
    WHEN (NEW.callback_url IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state
          AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_callback_enqueue();

-- jobs_complete_many: leased -> succeeded for many jobs in one statement, each fenced by its
-- own (id, generation) and the owner token: a job whose lease is gone matches nothing and is
-- left out of the answer; its siblings complete. Also charges the attempt (`attempt` is the
-- number of the attempt that ran: equal to the row's after jobs_claim, one more after
-- jobs_claim_many). Writes each job's `succeeded` JobEvent. Returns the ids completed.
-- The one spelling of a completion: the single path calls it with one job. As in
-- jobs_claim_many, jobs_job is reached by primary key only (`id = ANY(p_ids)`, the state a
-- parameter): no plan may prefer scanning the leased jobs' partial index.
CREATE OR REPLACE FUNCTION jobs_complete_many(
    p_ids uuid[], p_generations bigint[], p_worker text, p_attempts int[], p_results jsonb[]
) RETURNS TABLE (id uuid) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    leased_state CONSTANT text := 'leased';
BEGIN
    RETURN QUERY
    WITH done AS (
        UPDATE jobs_job AS j SET
            state = 'succeeded',
            result = r.result,
            attempt = r.attempt,
            finished_at = now(),
            error_category = '',
            error_message = '',
            updated_at = now()
        FROM unnest(p_ids, p_generations, p_attempts, p_results)
             AS r(id, generation, attempt, result)
        WHERE j.id = r.id AND j.id = ANY(p_ids) AND j.generation = r.generation
          AND j.lease_owner = p_worker AND j.state = leased_state
        RETURNING j.id, j.generation, j.attempt
    ),
    done_events AS (
        INSERT INTO jobs_jobevent
            (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
        SELECT d.id, 'leased', 'succeeded', d.generation, d.attempt, p_worker, '', 'completed',
               '{}'::jsonb, clock_timestamp()
        FROM done d
    )
    SELECT d.id FROM done d;
END;
$$;

-- jobs_complete_many_hand_over: jobs_complete_many for jobs of which some hold a serialization
-- key, plus each completed keyed job's hand-over, in one call (a group commit's keyed
-- successes no longer take a savepoint and a round trip each).
--   1. Complete every job, each fenced by its own (id, generation) and the owner token
--      (jobs_complete_many: the one spelling of a completion).
--   2. Take the advisory lock of each completed job's key (`p_lock_keys`, one per job, NULL
--      for an unkeyed one; jobs.dispatch names them), distinct, sorted as Python sorts them
--      (COLLATE "C": code point order), after the jobs' row locks, as every hand-over does.
--   3. Answer one row per completed job: its id and the oldest active job of its key other
--      than itself (the next head; NULLs when none or unkeyed). This statement takes a new
--      snapshot, so it sees every job committed by whoever held a key's lock before us: a
--      submission that found the key busy is seen here, and gets its message from the caller.
-- A job whose lease is gone is left out of the answer and takes no lock; its siblings complete.
-- State list: ACTIVE of jobs/states.py (literal: the lookup should use the key's partial index).
CREATE OR REPLACE FUNCTION jobs_complete_many_hand_over(
    p_ids uuid[],
    p_generations bigint[],
    p_worker text,
    p_attempts int[],
    p_results jsonb[],
    p_lock_keys text[]
) RETURNS TABLE (
    id uuid, next_id uuid, next_state text, next_created_at timestamptz, next_kind text,
    next_kind_version int, next_generation bigint, next_next_attempt_at timestamptz,
    next_priority smallint
) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    done_ids uuid[];
    k text;
BEGIN
    SELECT coalesce(array_agg(c.id), '{}'::uuid[]) INTO done_ids
    FROM jobs_complete_many(p_ids, p_generations, p_worker, p_attempts, p_results) c;
    FOR k IN
        SELECT DISTINCT r.lock_key COLLATE "C"
        FROM unnest(p_ids, p_lock_keys) AS r(id, lock_key)
        WHERE r.lock_key IS NOT NULL AND r.id = ANY(done_ids)
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext(k));
    END LOOP;
    RETURN QUERY
        SELECT r.id, h.id, h.state::text, h.created_at, h.kind::text, h.kind_version,
               h.generation, h.next_attempt_at, h.priority
        FROM unnest(p_ids, p_lock_keys) AS r(id, lock_key)
        JOIN jobs_job d ON d.id = r.id AND d.id = ANY(done_ids)
        LEFT JOIN LATERAL (
            SELECT j.id, j.state, j.created_at, j.kind, j.kind_version, j.generation,
                   j.next_attempt_at, j.priority
            FROM jobs_job j
            WHERE r.lock_key IS NOT NULL
              AND j.serialization_key = d.serialization_key
              AND j.state IN ('queued', 'leased', 'retry_wait')
              AND j.id <> r.id
            ORDER BY j.created_at, j.id
            LIMIT 1
        ) h ON true
        WHERE r.id = ANY(done_ids);
END;
$$;

-- jobs_heartbeat_many: extend the leases of one owner token on the database clock, each fenced
-- by its own (id, generation): a lease that is gone matches nothing and is left out of the
-- answer. One lease is a list of one (the single path's heartbeat and ctx.heartbeat()).
-- A job row locked elsewhere (an operator's open transaction) makes the beat fail after
-- lock_timeout instead of stalling every lease of the process's heartbeat thread behind it.
CREATE OR REPLACE FUNCTION jobs_heartbeat_many(
    p_ids uuid[], p_generations bigint[], p_leases double precision[], p_worker text
) RETURNS TABLE (id uuid, cancel_requested boolean) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    leased_state CONSTANT text := 'leased';
BEGIN
    RETURN QUERY
    UPDATE jobs_job AS j
    SET lease_until = now() + make_interval(secs => r.lease), heartbeat_at = now()
    FROM unnest(p_ids, p_generations, p_leases) AS r(id, generation, lease)
    WHERE j.id = r.id AND j.generation = r.generation AND j.lease_owner = p_worker
      AND j.state = leased_state
    RETURNING j.id, j.cancel_requested_at IS NOT NULL;
END;
$$;

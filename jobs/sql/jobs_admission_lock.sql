-- jobs_admission_lock(keys, serialization_key, exclude): admission control in one round trip.
-- Takes the transaction-scoped advisory locks of `keys` in the order given (callers sort them),
-- then returns the oldest active job of the serialization key other than `exclude`: the head a
-- submission waits behind, or the job a completion hands the turn to. Each statement of a
-- PL/pgSQL function takes a new snapshot, so the lookup sees every job committed by whoever
-- held the locks before us. State list: ACTIVE of jobs/states.py.
CREATE OR REPLACE FUNCTION jobs_admission_lock(
    p_keys text[], p_serialization_key text, p_exclude uuid
) RETURNS TABLE (
    id uuid, state text, created_at timestamptz, kind text, kind_version int,
    generation bigint, next_attempt_at timestamptz, priority smallint
) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    k text;
BEGIN
    FOREACH k IN ARRAY p_keys LOOP
        PERFORM pg_advisory_xact_lock(hashtext(k));
    END LOOP;
    IF p_serialization_key IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT j.id, j.state::text, j.created_at, j.kind::text, j.kind_version, j.generation,
               j.next_attempt_at, j.priority
        FROM jobs_job j
        WHERE j.serialization_key = p_serialization_key
          AND j.state IN ('queued', 'leased', 'retry_wait')
          AND j.id <> p_exclude
        ORDER BY j.created_at, j.id
        LIMIT 1;
END;
$$;

-- jobs_key_head(serialization_key, exclude): the head of a serialization key, the oldest active
-- job of the key other than `exclude` (none for an unknown or NULL key, or a NULL exclude).
-- The one spelling of that lookup: jobs_admission_lock asks it which job a submission waits
-- behind, jobs_complete_many_hand_over which job a completion hands the turn to. (The claim's
-- test "is any job of the key ahead of this one" is one probe of the same index in
-- jobs_claim_many: it counts the leased job as ahead too.) A SQL function, STABLE and without a SET clause,
-- so that the planner inlines it into its caller's query and walks the key's partial index
-- (jobs_job_serial_active_idx: the state list is literal here for that reason).
-- State list: ACTIVE of jobs/states.py.
CREATE OR REPLACE FUNCTION jobs_key_head(p_serialization_key text, p_exclude uuid)
RETURNS TABLE (
    id uuid, state text, created_at timestamptz, kind text, kind_version int,
    generation bigint, next_attempt_at timestamptz
) LANGUAGE sql STABLE
AS $$
    SELECT j.id, j.state::text, j.created_at, j.kind::text, j.kind_version, j.generation,
           j.next_attempt_at
    FROM jobs_job j
    WHERE j.serialization_key = p_serialization_key
      AND j.state IN ('queued', 'leased', 'retry_wait')
      AND j.id <> p_exclude
    ORDER BY j.created_at, j.id
    LIMIT 1
$$;

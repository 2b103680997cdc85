-- jobs_claim: the one-job claim of the previous release's workers, kept for a rolling deploy
-- (a worker of that release still calls it while the new one runs). It is jobs_claim_many with
-- one id and the full rules (jobs/sql/jobs_claim_many.sql): the same answers as before, no
-- rule of its own. This release's workers do not call it; the next release drops it.
-- plpgsql, not sql: an earlier migration loads this file before jobs_claim_many has its new
-- signature, and a sql function's body is checked against it when created.
CREATE OR REPLACE FUNCTION jobs_claim(
    p_id uuid,
    p_kind text,
    p_kind_version int,
    p_worker text,
    p_lease double precision,
    p_tenant_limit int,
    p_kind_limit int
) RETURNS TABLE (
    status text,
    generation bigint,
    attempt int,
    kind text,
    kind_version int,
    input jsonb,
    input_version int,
    owner_id int,
    tenant_id bigint,
    serialization_key text,
    deadline timestamptz,
    cancel_requested boolean,
    previous_state text,
    claimed_at timestamptz
) LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT c.status, c.generation, c.attempt, c.kind, c.kind_version, c.input, c.input_version,
           c.owner_id, c.tenant_id, c.serialization_key, c.deadline, c.cancel_requested,
           c.previous_state, c.claimed_at
    FROM jobs_claim_many(ARRAY[p_id], ARRAY[p_kind], ARRAY[p_kind_version], ARRAY[p_lease],
                         p_worker, true, p_tenant_limit, p_kind_limit) AS c;
END;
$$;

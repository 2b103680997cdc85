-- jobs_claim_many: the batch claim. One statement leases every job of a batch message that
-- needs no rule beyond "due and waiting": claimable (queued or retry_wait) and due, of the
-- kind and version the message names, the head of its serialization key if it has one (no
-- older active job of the key, none of it leased), and not back from an expired lease. Everything else answers 'other' and goes through jobs_claim one at a time, which
-- applies the full rules (keys, caps, takeover of an expired lease, a kind mismatch).
--
-- The attempt is NOT charged here: generation + 1 (the fence) and the lease only. The
-- worker charges it with the outcome, for jobs whose handler started (attempt = the
-- `attempt` answered here). If the process dies mid-batch nobody knows which job killed it:
-- the reaper gives every job back uncharged, with error_category 'lease_expired', and such
-- a job is never batch-claimed again until it leaves that category: it runs alone, charged,
-- so a job that kills its process spends its own budget and no sibling's.
-- Every scan of jobs_job here is by primary key (`id = ANY(p_ids)`), and the state lists are
-- parameters, not literals: a literal list lets the planner prove a partial index's predicate
-- and, with statistics from a quiet moment (few active jobs), prefer scanning every due job
-- to looking 20 ids up (5.9 ms for 20 ids among 10,000 queued, 212 ms with empty-table
-- statistics; now about 0.1 ms a job either way; tests/integration/test_batch_plans.py).
-- Its commit does not wait for the WAL flush (as jobs_claim: every later write is fenced).
-- State lists: FINISHED, CLAIMABLE of jobs/states.py (tests/integration/test_sql_files.py).
CREATE OR REPLACE FUNCTION jobs_claim_many(
    p_ids uuid[],
    p_kinds text[],
    p_kind_versions int[],
    p_leases double precision[],
    p_worker text
) RETURNS TABLE (
    id uuid,
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
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    claimable_states CONSTANT text[] := ARRAY['queued', 'retry_wait'];
    finished_states CONSTANT text[] := ARRAY['succeeded', 'failed', 'cancelled', 'quarantined'];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH req AS (
        SELECT r.id, r.kind, r.kind_version, r.lease, r.ord
        FROM unnest(p_ids, p_kinds, p_kind_versions, p_leases)
             WITH ORDINALITY AS r(id, kind, kind_version, lease, ord)
    ),
    target AS (
        SELECT j.id, j.state AS previous_state, r.lease
        FROM jobs_job j JOIN req r ON r.id = j.id
        WHERE j.id = ANY(p_ids)
          AND j.state = ANY(claimable_states)
          AND j.next_attempt_at <= clock_timestamp()
          AND j.kind = r.kind AND j.kind_version = r.kind_version
          AND (
            j.serialization_key IS NULL OR NOT EXISTS (
              -- Literal states here: this lookup should use the key's partial index.
              SELECT 1 FROM jobs_job e
              WHERE e.serialization_key = j.serialization_key
                AND e.state IN ('queued', 'leased', 'retry_wait')
                AND (e.state = 'leased' OR (e.created_at, e.id) < (j.created_at, j.id))
            )
          )
          AND j.error_category <> 'lease_expired'
        ORDER BY j.id
        FOR UPDATE OF j SKIP LOCKED
    ),
    claimed AS (
        UPDATE jobs_job AS j SET
            state = 'leased',
            generation = j.generation + 1,
            lease_owner = p_worker,
            lease_until = now() + make_interval(secs => t.lease),
            heartbeat_at = now(),
            started_at = COALESCE(j.started_at, now()),
            updated_at = now()
        FROM target t
        WHERE j.id = t.id AND j.id = ANY(p_ids)
        RETURNING j.id, j.generation, j.attempt + 1 AS attempt, j.kind, j.kind_version, j.input,
                  j.input_version, j.owner_id, j.tenant_id, j.serialization_key, j.deadline,
                  j.cancel_requested_at IS NOT NULL AS cancel_requested, t.previous_state
    ),
    claim_events AS (
        INSERT INTO jobs_jobevent
            (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
        SELECT c.id, c.previous_state, 'leased', c.generation, c.attempt, p_worker, '',
               'claimed in a batch', '{}'::jsonb, clock_timestamp()
        FROM claimed c
    )
    SELECT r.id,
        CASE
            WHEN c.id IS NOT NULL THEN 'claimed'
            WHEN cur.id IS NULL THEN 'missing'
            WHEN cur.state = ANY(finished_states) THEN 'finished'
            ELSE 'other'
        END::text,
        c.generation, c.attempt, COALESCE(c.kind, cur.kind)::text,
        COALESCE(c.kind_version, cur.kind_version), c.input, c.input_version, c.owner_id,
        c.tenant_id, c.serialization_key::text, c.deadline, c.cancel_requested, c.previous_state::text,
        CASE WHEN c.id IS NOT NULL THEN now() END
    FROM req r
    LEFT JOIN claimed c ON c.id = r.id
    LEFT JOIN jobs_job cur ON cur.id = r.id AND cur.id = ANY(p_ids)
    ORDER BY r.ord;
END;
$$;

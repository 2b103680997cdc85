-- jobs_claim: the one-job claim (the prefork path, and a batch's jobs that need the full rules).
-- Read, lock-free check, the caps' advisory locks, the fenced claim UPDATE (generation + 1,
-- attempt + 1: the attempt is charged here, the handler starts right after), the `leased`
-- JobEvent and the job's input, in one call. Its commit does not wait for the WAL flush
-- (synchronous_commit off for its own transaction; jobs/leases.py says why that is safe).
-- Answers a status: claimed, missing, finished, busy, early, waiting, mismatch.
-- State lists: FINISHED, CLAIMABLE and ACTIVE of jobs/states.py (tests/integration/test_sql_files.py).
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
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    cur record;
    k text;
    ok record;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT j.state, j.kind, j.kind_version, j.tenant_id, j.lease_until, j.next_attempt_at
      INTO cur FROM jobs_job j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'missing'::text, NULL::bigint, NULL::int, NULL::text, NULL::int,
            NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::text, NULL::timestamptz,
            NULL::boolean, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF cur.state IN ('succeeded', 'failed', 'cancelled', 'quarantined') THEN
        RETURN QUERY SELECT 'finished'::text, NULL::bigint, NULL::int, cur.kind::text,
            cur.kind_version, NULL::jsonb, NULL::int, NULL::int, cur.tenant_id, NULL::text,
            NULL::timestamptz, NULL::boolean, cur.state::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF p_kind IS DISTINCT FROM cur.kind OR p_kind_version IS DISTINCT FROM cur.kind_version THEN
        RETURN QUERY SELECT 'mismatch'::text, NULL::bigint, NULL::int, cur.kind::text,
            cur.kind_version, NULL::jsonb, NULL::int, NULL::int, cur.tenant_id, NULL::text,
            NULL::timestamptz, NULL::boolean, cur.state::text, NULL::timestamptz;
        RETURN;
    END IF;
    -- Caps are counts over other rows: claimers of one tenant/kind take turns.
    FOREACH k IN ARRAY jobs_claim_lock_keys(cur.kind, cur.tenant_id, p_tenant_limit,
                                             p_kind_limit) LOOP
        PERFORM pg_advisory_xact_lock(hashtext(k));
    END LOOP;
    WITH target AS (
        SELECT j.id, j.state AS previous_state
        FROM jobs_job j
        WHERE j.id = p_id
          AND (
            (j.state IN ('queued', 'retry_wait') AND j.next_attempt_at <= clock_timestamp())
            -- Taking over an expired lease spends an attempt: only within budget, else the
            -- reaper quarantines it (a poison job redelivered on worker loss must not loop).
            OR (j.state = 'leased' AND j.lease_until < now() AND j.attempt < j.max_attempts
                AND (j.deadline IS NULL OR j.deadline > now()))
          )
          AND (
            j.serialization_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM jobs_job e
              WHERE e.serialization_key = j.serialization_key
                AND e.state IN ('queued', 'leased', 'retry_wait')
                AND (e.created_at, e.id) < (j.created_at, j.id)
            )
          )
          AND (
            p_tenant_limit IS NULL OR j.tenant_id IS NULL OR (
              SELECT count(*) FROM jobs_job t
              WHERE t.tenant_id = j.tenant_id AND t.kind = j.kind AND t.state = 'leased'
                AND t.id <> j.id
            ) < p_tenant_limit
          )
          AND (
            p_kind_limit IS NULL OR (
              SELECT count(*) FROM jobs_job q
              WHERE q.kind = j.kind AND q.state = 'leased' AND q.id <> j.id
            ) < p_kind_limit
          )
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE jobs_job AS j SET
        state = 'leased',
        generation = j.generation + 1,
        attempt = j.attempt + 1,
        lease_owner = p_worker,
        lease_until = now() + make_interval(secs => p_lease),
        heartbeat_at = now(),
        started_at = COALESCE(j.started_at, now()),
        updated_at = now()
    FROM target
    WHERE j.id = target.id
    RETURNING j.generation, j.attempt, j.kind, j.kind_version, j.input, j.input_version,
              j.owner_id, j.tenant_id, j.serialization_key, j.deadline,
              j.cancel_requested_at IS NOT NULL AS cancel_requested,
              target.previous_state, now() AS claimed_at
    INTO ok;
    IF ok IS NULL THEN
        -- Read again: a concurrent claimer or finisher may have moved it meanwhile.
        SELECT j.state, j.kind, j.kind_version, j.tenant_id, j.lease_until, j.next_attempt_at
          INTO cur FROM jobs_job j WHERE j.id = p_id;
        RETURN QUERY SELECT
            CASE
                WHEN cur.state IN ('succeeded', 'failed', 'cancelled', 'quarantined')
                     THEN 'finished'
                WHEN cur.state = 'leased' AND cur.lease_until > now() THEN 'busy'
                WHEN cur.state IN ('queued', 'retry_wait')
                     AND cur.next_attempt_at > clock_timestamp() THEN 'early'
                ELSE 'waiting'
            END::text,
            NULL::bigint, NULL::int, cur.kind::text, cur.kind_version, NULL::jsonb, NULL::int,
            NULL::int, cur.tenant_id, NULL::text, NULL::timestamptz, NULL::boolean,
            cur.state::text, NULL::timestamptz;
        RETURN;
    END IF;
    INSERT INTO jobs_jobevent
        (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
    VALUES (
        p_id, ok.previous_state, 'leased', ok.generation, ok.attempt, p_worker, '',
        CASE WHEN ok.previous_state = 'leased' THEN 'took over expired lease' ELSE 'claimed' END,
        '{}'::jsonb, clock_timestamp()
    );
    RETURN QUERY SELECT 'claimed'::text, ok.generation, ok.attempt, ok.kind::text,
        ok.kind_version, ok.input, ok.input_version, ok.owner_id, ok.tenant_id,
        ok.serialization_key::text, ok.deadline, ok.cancel_requested, ok.previous_state::text,
        ok.claimed_at;
END;
$$;

-- jobs_claim_many: the claim, of one job or of a batch message's jobs, in one call. Each id comes
-- with the kind and version its message names and its lease's length. Two sets of rules:
--   p_charge = false (a batch): lease every job that needs no rule beyond "due and waiting":
--     claimable (queued or retry_wait) and due, of the kind and version named, its key's turn
--     (below), and not back from an expired lease. The attempt is NOT charged: generation + 1
--     (the fence) and the lease only; the worker charges it with the outcome, for jobs whose
--     handler started (`attempt` answers the attempt it will be). If the process dies
--     mid-batch nobody knows which job killed it: the reaper gives every job back uncharged,
--     with error_category 'lease_expired', and such a job is never batch-claimed again until
--     it leaves that category: it runs alone, charged, so a job that kills its process spends
--     its own budget and no sibling's. A job not claimed answers missing, finished or 'other'
--     (the worker then claims it alone, charged).
--   p_charge = true (one job, the full rules): the attempt is charged here (attempt + 1, the
--     handler starts right after); an expired lease is taken over within the attempt budget
--     and the deadline (else the reaper quarantines it: a poison job redelivered on worker
--     loss must not loop); the kind's caps (p_tenant_limit, p_kind_limit) hold: their advisory
--     locks first, then counts over other rows, so claimers of one tenant/kind take turns.
--     Answers claimed, missing, finished, mismatch (the kind named is not the job's: the
--     answer carries the real one), busy, early or waiting. Caps need one id a call: a cap is a
--     count that one statement's claims of several ids would not see.
-- A key's turn: a keyed job is claimed only when no other active job of its key is ahead of
-- it: older (it is not the key's head), or holding the lease. The second half matters only
-- when a younger job of the key holds the lease (after an operator redrive of an older one):
-- the partial unique index jobs_job_one_leased_per_serialization_key (at most one leased job a
-- key) would refuse that claim anyway; without the check the refusal is a unique violation
-- that aborts the whole statement, with it the job alone answers (waiting, or 'other'). The
-- index still refuses a claim raced by a concurrent claimer of the key (callers catch it).
-- Literal states in the key's lookup and the caps' counts: they should use partial indexes.
-- The claimed rows come straight from the claim's UPDATE, in the order of p_ids. Only when
-- some id was not claimed are those ids read again, in a second statement (a new snapshot: a
-- concurrent claimer or finisher that committed meanwhile is seen as busy or finished).
-- Every scan of jobs_job for the ids is by primary key (`id = ANY(p_ids)`), and its state lists
-- are parameters, not literals: a literal list lets the planner prove a partial index's predicate
-- and, with statistics from a quiet moment (few active jobs), prefer scanning every due job to
-- looking 20 ids up (tests/integration/test_batch_plans.py). Its commit does not wait for the
-- WAL flush (synchronous_commit off for its own transaction; jobs/leases.py says why that is
-- safe). State lists: FINISHED, CLAIMABLE, ACTIVE of jobs/states.py
-- (tests/integration/test_sql_files.py).
CREATE OR REPLACE FUNCTION jobs_claim_many(
    p_ids uuid[],
    p_kinds text[],
    p_kind_versions int[],
    p_leases double precision[],
    p_worker text,
    p_charge boolean DEFAULT false,
    p_tenant_limit int DEFAULT NULL,
    p_kind_limit int DEFAULT NULL
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
    claimed_at timestamptz,
    priority smallint
) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET lock_timeout = 5000
AS $$
#variable_conflict use_column
DECLARE
    claimable_states CONSTANT text[] := ARRAY['queued', 'retry_wait'];
    finished_states CONSTANT text[] := ARRAY['succeeded', 'failed', 'cancelled', 'quarantined'];
    leased_state CONSTANT text := 'leased';
    k text;
    ok record;
    claimed_ids uuid[] := '{}';
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_tenant_limit IS NOT NULL OR p_kind_limit IS NOT NULL THEN
        IF NOT p_charge OR cardinality(p_ids) <> 1 THEN
            RAISE EXCEPTION 'jobs_claim_many: caps are applied to one charged claim at a time';
        END IF;
        FOR k IN
            SELECT unnest(jobs_claim_lock_keys(j.kind, j.tenant_id, p_tenant_limit, p_kind_limit))
            FROM jobs_job j
            WHERE j.id = ANY(p_ids) AND j.kind = p_kinds[1] AND j.kind_version = p_kind_versions[1]
              AND j.state = ANY(claimable_states || leased_state)
        LOOP
            PERFORM pg_advisory_xact_lock(hashtext(k));
        END LOOP;
    END IF;
    FOR ok IN
        WITH req AS (
            SELECT r.id, r.kind, r.kind_version, r.lease, r.ord
            FROM unnest(p_ids, p_kinds, p_kind_versions, p_leases)
                 WITH ORDINALITY AS r(id, kind, kind_version, lease, ord)
        ),
        target AS (
            SELECT j.id, j.state AS previous_state, r.lease, r.ord
            FROM jobs_job j JOIN req r ON r.id = j.id
            WHERE j.id = ANY(p_ids)
              AND j.kind = r.kind AND j.kind_version = r.kind_version
              AND (
                (j.state = ANY(claimable_states) AND j.next_attempt_at <= clock_timestamp()
                 AND (p_charge OR j.error_category <> 'lease_expired'))
                OR (p_charge AND j.state = leased_state AND j.lease_until < now()
                    AND j.attempt < j.max_attempts AND (j.deadline IS NULL OR j.deadline > now()))
              )
              AND (
                j.serialization_key IS NULL OR NOT EXISTS (  -- the key's turn (above)
                  SELECT 1 FROM jobs_job e
                  WHERE e.serialization_key = j.serialization_key
                    AND e.state IN ('queued', 'leased', 'retry_wait') AND e.id <> j.id
                    AND (e.state = leased_state OR (e.created_at, e.id) < (j.created_at, j.id))
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
            ORDER BY j.id
            FOR UPDATE OF j SKIP LOCKED
        ),
        claimed AS (
            UPDATE jobs_job AS j SET
                state = 'leased',
                generation = j.generation + 1,
                attempt = j.attempt + CASE WHEN p_charge THEN 1 ELSE 0 END,
                lease_owner = p_worker,
                lease_until = now() + make_interval(secs => t.lease),
                heartbeat_at = now(),
                started_at = COALESCE(j.started_at, now()),
                updated_at = now()
            FROM target t
            WHERE j.id = t.id AND j.id = ANY(p_ids)
            RETURNING j.id, j.generation,
                      j.attempt + CASE WHEN p_charge THEN 0 ELSE 1 END AS attempt, j.kind,
                      j.kind_version, j.input, j.input_version, j.owner_id, j.tenant_id,
                      j.serialization_key, j.deadline,
                      j.cancel_requested_at IS NOT NULL AS cancel_requested, t.previous_state,
                      j.priority, t.ord
        ),
        claim_events AS (
            INSERT INTO jobs_jobevent
                (job_id, from_state, to_state, generation, attempt, worker, actor, reason,
                 details, at)
            SELECT c.id, c.previous_state, 'leased', c.generation, c.attempt, p_worker, '',
                   CASE
                       WHEN NOT p_charge THEN 'claimed in a batch'
                       WHEN c.previous_state = leased_state THEN 'took over expired lease'
                       ELSE 'claimed'
                   END,
                   '{}'::jsonb, clock_timestamp()
            FROM claimed c
        )
        SELECT c.* FROM claimed c ORDER BY c.ord
    LOOP
        id := ok.id;
        status := 'claimed';
        generation := ok.generation;
        attempt := ok.attempt;
        kind := ok.kind;
        kind_version := ok.kind_version;
        input := ok.input;
        input_version := ok.input_version;
        owner_id := ok.owner_id;
        tenant_id := ok.tenant_id;
        serialization_key := ok.serialization_key;
        deadline := ok.deadline;
        cancel_requested := ok.cancel_requested;
        previous_state := ok.previous_state;
        claimed_at := now();
        priority := ok.priority;
        RETURN NEXT;
        claimed_ids := claimed_ids || ok.id;
    END LOOP;
    IF cardinality(claimed_ids) = cardinality(p_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.id,
        CASE
            WHEN cur.id IS NULL THEN 'missing'
            WHEN cur.state = ANY(finished_states) THEN 'finished'
            WHEN NOT p_charge THEN 'other'
            WHEN cur.kind IS DISTINCT FROM r.kind
                 OR cur.kind_version IS DISTINCT FROM r.kind_version THEN 'mismatch'
            WHEN cur.state = leased_state AND cur.lease_until > now() THEN 'busy'
            WHEN cur.state = ANY(claimable_states) AND cur.next_attempt_at > clock_timestamp()
                 THEN 'early'
            ELSE 'waiting'
        END::text,
        NULL::bigint, NULL::int, cur.kind::text, cur.kind_version, NULL::jsonb, NULL::int,
        NULL::int, cur.tenant_id, NULL::text, NULL::timestamptz, NULL::boolean, cur.state::text,
        NULL::timestamptz, NULL::smallint
    FROM unnest(p_ids, p_kinds, p_kind_versions) WITH ORDINALITY AS r(id, kind, kind_version, ord)
    LEFT JOIN jobs_job cur ON cur.id = r.id AND cur.id = ANY(p_ids)
    WHERE r.id <> ALL(claimed_ids)
    ORDER BY r.ord;
END;
$$;

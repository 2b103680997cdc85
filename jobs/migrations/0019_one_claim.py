"""One claim: jobs_claim_many claims one job (the full rules, the attempt charged) or a batch
message's jobs (jobs/sql/jobs_claim_many.sql); the eligibility, the key's turn, the UPDATE and
the event are written once.

- jobs_claim_many gains `p_charge` (the one-job claim's full rules: the attempt charged, an
  expired lease taken over, the caps, a kind mismatch answered) and the caps' limits, all with
  defaults: the previous release's batch call (five arguments) means what it meant. Its old
  signature is dropped first (a second function of the name would make that call ambiguous).
- jobs_claim becomes one call of jobs_claim_many, for the previous release's workers during a
  rolling deploy; a later release drops it.

Reverse: both functions as migration 0018 left them.
"""

from django.db import migrations

from jobs.sql import sql_file

OLD_SIGNATURE = "jobs_claim_many(uuid[], text[], int[], double precision[], text)"
NEW_SIGNATURE = (
    "jobs_claim_many(uuid[], text[], int[], double precision[], text, boolean, int, int)"
)

FORWARD = "\n".join(
    [
        f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE};",
        sql_file("jobs_claim_many"),
        sql_file("jobs_claim"),
    ]
)

# jobs/sql/jobs_claim.sql and jobs/sql/jobs_claim_many.sql as migration 0018 left them.
CLAIM_0018 = """-- jobs_claim: the one-job claim (the prefork path, and a batch's jobs that need the full rules).
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
"""

CLAIM_MANY_0018 = """-- jobs_claim_many: the batch claim. One statement leases every job of a batch message that
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
"""

REVERSE = "\n".join([f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE};", CLAIM_MANY_0018, CLAIM_0018])


class Migration(migrations.Migration):
    dependencies = [("jobs", "0018_counter")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]

"""The job's priority in the rows the hot functions answer: a retry, a release and a keyed
job's successor get a message at the job's own priority, not its kind's default (issue 27).

jobs_claim_many (its claimed rows), jobs_admission_lock (the key's head) and
jobs_complete_many_hand_over (the next head) each gain a last result column, `priority`
(`next_priority`); a function's result columns cannot be changed in place, so each is dropped
and created again from its file, in this one transaction. A process of the previous release
reads columns by name and ignores the new one; its prepared statements of these functions fail
once per connection with "cached plan must not change result type" (jobs.prepared prepares
again: outside a transaction at once, inside one after its rollback).

Reverse: the three functions as migrations 0013 and 0019 left them.
"""

from django.db import migrations

from jobs.sql import sql_file

SIGNATURES = {
    "jobs_claim_many": (
        "jobs_claim_many(uuid[], text[], int[], double precision[], text, boolean, int, int)"
    ),
    "jobs_admission_lock": "jobs_admission_lock(text[], text, uuid)",
    "jobs_complete_many_hand_over": (
        "jobs_complete_many_hand_over(uuid[], bigint[], text, int[], jsonb[], text[])"
    ),
}


def _replace(texts: dict[str, str]) -> str:
    return "\n".join(
        f"DROP FUNCTION IF EXISTS {SIGNATURES[name]};\n{text}" for name, text in texts.items()
    )


FORWARD = _replace({name: sql_file(name) for name in SIGNATURES})

# jobs/sql/jobs_claim_many.sql before this migration.
CLAIM_MANY_0019 = """\
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
    claimed_at timestamptz
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
                      t.ord
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
        NULL::timestamptz
    FROM unnest(p_ids, p_kinds, p_kind_versions) WITH ORDINALITY AS r(id, kind, kind_version, ord)
    LEFT JOIN jobs_job cur ON cur.id = r.id AND cur.id = ANY(p_ids)
    WHERE r.id <> ALL(claimed_ids)
    ORDER BY r.ord;
END;
$$;
"""

# jobs/sql/jobs_admission_lock.sql before this migration.
ADMISSION_LOCK_0015 = """\
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
    generation bigint, next_attempt_at timestamptz
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
               j.next_attempt_at
        FROM jobs_job j
        WHERE j.serialization_key = p_serialization_key
          AND j.state IN ('queued', 'leased', 'retry_wait')
          AND j.id <> p_exclude
        ORDER BY j.created_at, j.id
        LIMIT 1;
END;
$$;
"""

# jobs/sql/jobs_complete_many_hand_over.sql before this migration.
HAND_OVER_0015 = """\
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
    next_kind_version int, next_generation bigint, next_next_attempt_at timestamptz
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
               h.generation, h.next_attempt_at
        FROM unnest(p_ids, p_lock_keys) AS r(id, lock_key)
        JOIN jobs_job d ON d.id = r.id AND d.id = ANY(done_ids)
        LEFT JOIN LATERAL (
            SELECT j.id, j.state, j.created_at, j.kind, j.kind_version, j.generation,
                   j.next_attempt_at
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
"""

REVERSE = _replace(
    {
        "jobs_claim_many": CLAIM_MANY_0019,
        "jobs_admission_lock": ADMISSION_LOCK_0015,
        "jobs_complete_many_hand_over": HAND_OVER_0015,
    }
)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0023_job_callbacks")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]

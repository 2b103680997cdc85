"""The worker's two hot writes as database functions: one round trip each.

- jobs_claim_lock_keys(kind, tenant, tenant_limit, kind_limit): the advisory-lock keys a claim
  takes, in the sorted order jobs.dispatch.admission_lock_keys uses (a unit test compares them).
- jobs_claim(...): read, lock-free check, cap locks, the fenced claim UPDATE, the `leased`
  JobEvent, and the job's input, in one call. Its commit does not wait for the WAL flush
  (synchronous_commit is set off for its transaction only; see jobs.leases for why that is safe).
  It answers a status: claimed, missing, finished, busy (a live lease elsewhere), early (not
  due), waiting (not its turn, a concurrent claimer, or an expired lease out of budget), or
  mismatch (the caller guessed the kind wrong; it calls again with the kind returned).
- jobs_complete(id, generation, owner, result): the fenced leased -> succeeded UPDATE and its
  JobEvent; false when the fence no longer holds (the caller raises LeaseLost).
Plans of the statements inside are cached per connection by PL/pgSQL.
"""

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION jobs_claim_lock_keys(
    p_kind text, p_tenant_id bigint, p_tenant_limit int, p_kind_limit int
) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT array_remove(ARRAY[
        CASE WHEN p_kind_limit IS NOT NULL THEN 'jobs.kind:' || p_kind END,
        CASE WHEN p_tenant_limit IS NOT NULL AND p_tenant_id IS NOT NULL
             THEN 'jobs.tenant_kind:' || p_tenant_id || ':' || p_kind END
    ], NULL)
$$;

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
) LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION jobs_complete(
    p_id uuid, p_generation bigint, p_worker text, p_result jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    done_attempt int;
BEGIN
    UPDATE jobs_job SET
        state = 'succeeded',
        result = p_result,
        finished_at = now(),
        error_category = '',
        error_message = '',
        updated_at = now()
    WHERE id = p_id AND generation = p_generation AND lease_owner = p_worker
      AND state = 'leased'
    RETURNING attempt INTO done_attempt;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO jobs_jobevent
        (job_id, from_state, to_state, generation, attempt, worker, actor, reason, details, at)
    VALUES (p_id, 'leased', 'succeeded', p_generation, done_attempt, p_worker, '', 'completed',
            '{}'::jsonb, clock_timestamp());
    RETURN true;
END;
$$;
"""

REVERSE = """
DROP FUNCTION IF EXISTS jobs_complete(uuid, bigint, text, jsonb);
DROP FUNCTION IF EXISTS jobs_claim(uuid, text, int, text, double precision, int, int);
DROP FUNCTION IF EXISTS jobs_claim_lock_keys(text, bigint, int, int);
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_job_ids_time_ordered")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]

"""jobs_claim_lock_keys in PL/pgSQL, with an early answer when the kind has no caps.

As a LANGUAGE sql function called from jobs_claim's FOREACH it was planned again on every
call (`perf` of a claim/complete loop: fmgr_sql and its planner, a tenth of PostgreSQL's time
on the pair). PL/pgSQL caches the plan of its expression per connection, and a kind without a
tenant or kind cap (most kinds) returns the empty array without building one. Same signature
and same keys in the same order (unit/test_claim_function compares them with
jobs.dispatch.admission_lock_keys).
"""

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION jobs_claim_lock_keys(
    p_kind text, p_tenant_id bigint, p_tenant_limit int, p_kind_limit int
) RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_kind_limit IS NULL AND p_tenant_limit IS NULL THEN
        RETURN '{}'::text[];
    END IF;
    RETURN array_remove(ARRAY[
        CASE WHEN p_kind_limit IS NOT NULL THEN 'jobs.kind:' || p_kind END,
        CASE WHEN p_tenant_limit IS NOT NULL AND p_tenant_id IS NOT NULL
             THEN 'jobs.tenant_kind:' || p_tenant_id || ':' || p_kind END
    ], NULL);
END;
$$;
"""

REVERSE = r"""
CREATE OR REPLACE FUNCTION jobs_claim_lock_keys(
    p_kind text, p_tenant_id bigint, p_tenant_limit int, p_kind_limit int
) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT array_remove(ARRAY[
        CASE WHEN p_kind_limit IS NOT NULL THEN 'jobs.kind:' || p_kind END,
        CASE WHEN p_tenant_limit IS NOT NULL AND p_tenant_id IS NOT NULL
             THEN 'jobs.tenant_kind:' || p_tenant_id || ':' || p_kind END
    ], NULL)
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0009_admission_lock_function")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]

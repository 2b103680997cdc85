-- The advisory-lock keys a claim takes for a kind's caps, in the order
-- jobs.admission.admission_lock_keys sorts them (tests/integration/test_claim_function.py compares them).
-- A kind without caps (most kinds) answers at once, without building an array.
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

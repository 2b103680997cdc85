"""The listing indexes ascend (issue 28): `(owner, created_at)` and, for tenant jobs only,
`(tenant, created_at)`, in place of `(owner, -created_at)` and `(tenant, -created_at)`.

A new job has the largest created_at of its owner, so in a descending index it always went in
at the front of the owner's range; a page split there leaves the older half behind, half full
and never written again, and the two indexes settled at 1.55x the bytes a row of a freshly
built one in the soak. Ascending, the new entry is the last of the owner's range, where the
B-tree's split keeps the left page full. "Newest first" reads the index backward, as fast.
Untenanted jobs no longer get an entry in the tenant index (a `tenant_id = x` or `IN (...)`
condition implies `IS NOT NULL`, so the planner still uses it).

Built CONCURRENTLY (this migration is not atomic): new indexes first, then the old ones are
dropped, so the listing is never without one and writers are never blocked.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0024_hot_functions_priority"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                fields=["tenant", "created_at"],
                condition=models.Q(("tenant__isnull", False)),
                name="jobs_job_tenant_at_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(fields=["owner", "created_at"], name="jobs_job_owner_at_idx"),
        ),
        RemoveIndexConcurrently(model_name="job", name="jobs_job_tenant_created_idx"),
        RemoveIndexConcurrently(model_name="job", name="jobs_job_owner_created_idx"),
    ]

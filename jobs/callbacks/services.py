"""What the rest of the library calls: the submit-time check and the sender's entry point."""

from __future__ import annotations

from jobs.exceptions import InvalidCallbackUrl
from jobs.models import Tenant

from .destination import callback_url_check, host_allowed, url_host
from .signing import tenant_keys


def callback_check(url: str, *, tenant: Tenant | None) -> str:
    """A submission's callback_url, checked (jobs.callbacks.destination), for a job whose
    tenant has a signing secret and may send to its host; else InvalidCallbackUrl."""
    callback_url_check(url)
    name = tenant.name if tenant is not None else None
    if not host_allowed(url_host(url), name):
        scope = f"tenant {name!r}" if name is not None else "jobs without a tenant"
        raise InvalidCallbackUrl(
            f"callback_url's host {url_host(url)!r} is not among the callback hosts of {scope} "
            "(JOBS_CALLBACK_ALLOWED_HOSTS)"
        )
    if not tenant_keys(name):
        scope = f"tenant {tenant.name!r}" if tenant is not None else "jobs without a tenant"
        raise InvalidCallbackUrl(
            f"callbacks are not set up for {scope}: the server has no signing secret for it "
            "(JOBS_CALLBACK_SECRETS)"
        )
    return url

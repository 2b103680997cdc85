"""System checks of the callback settings: they name the setting and the tenant, never a
secret."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from .signing import secrets_problems


@register("jobs")
def jobs_callback_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    secrets = getattr(settings, "JOBS_CALLBACK_SECRETS", None)
    if secrets is not None:
        errors += [
            Error(f"JOBS_CALLBACK_SECRETS {problem}.", id="jobs.E020")
            for problem in secrets_problems(secrets)
        ]
    for network in getattr(settings, "JOBS_CALLBACK_ALLOWED_NETWORKS", []) or []:
        try:
            ipaddress.ip_network(network, strict=False)
        except (TypeError, ValueError):
            errors.append(
                Error(
                    f"JOBS_CALLBACK_ALLOWED_NETWORKS: {network!r} is not a network "
                    "(e.g. '10.0.0.0/8' or 'fd00::/8').",
                    id="jobs.E021",
                )
            )
    hosts = getattr(settings, "JOBS_CALLBACK_ALLOWED_HOSTS", {})
    if not isinstance(hosts, dict) or not all(
        isinstance(name, str)
        and isinstance(entries, list | tuple)
        and all(isinstance(e, str) and e.strip(".") for e in entries)
        for name, entries in hosts.items()
    ):
        errors.append(
            Error(
                "JOBS_CALLBACK_ALLOWED_HOSTS must map tenant names ('' for jobs without a "
                "tenant) to lists of host names (e.g. {'acme': ['hooks.acme.com', "
                "'.acme.net']}).",
                id="jobs.E022",
            )
        )
    return errors

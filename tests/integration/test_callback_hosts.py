"""JOBS_CALLBACK_ALLOWED_HOSTS: each tenant's callbacks go only to its hosts, checked at submit
(a 400 naming callback_url, nothing written) and again at send time (a delivery to a host
taken off the list fails, recorded, without a request)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

import jobs
from jobs.callbacks.delivery import callbacks_send_due
from jobs.callbacks.destination import host_allowed
from jobs.exceptions import InvalidCallbackUrl
from jobs.models import CallbackDelivery, Job, Tenant
from tests.callback_receiver import callback_receiver
from tests.integration.api_helpers import submit, token_client

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "whsec_" + base64.b64encode(b"personal-callback-secret-32bytes").decode()


@pytest.fixture(autouse=True)
def _callbacks(settings: Any) -> None:
    settings.JOBS_CALLBACK_SECRETS = {"": SECRET, "acme": SECRET}
    settings.JOBS_CALLBACK_ALLOW_HTTP = True
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.JOBS_CALLBACK_ALLOWED_HOSTS = {"acme": ["hooks.acme.example", ".acme.test"]}


@pytest.mark.parametrize(
    ("host", "tenant", "allowed"),
    [
        ("hooks.acme.example", "acme", True),
        ("HOOKS.ACME.EXAMPLE.", "acme", True),
        ("acme.test", "acme", True),
        ("a.b.acme.test", "acme", True),
        ("evil-acme.test", "acme", False),
        ("hooks.acme.example.evil.com", "acme", False),
        ("other.example", "acme", False),
        ("anything.example", None, True),  # no entry for jobs without a tenant: any host
    ],
)
def test_host_allowed__exact_names_and_dot_domains(
    host: str, tenant: str | None, allowed: bool
) -> None:
    assert host_allowed(host, tenant) is allowed


def test_a_host_off_the_tenants_list__refused_at_submit__400_nothing_written(
    user: Any, tenant: Tenant
) -> None:
    with pytest.raises(InvalidCallbackUrl, match="callback hosts of tenant 'acme'"):
        jobs.submit(
            kind="noop", input={}, owner=user, tenant=tenant, callback_url="https://x.example/h"
        )
    response = submit(
        token_client(user),
        {"kind": "noop", "input": {}, "callback_url": "https://x.example/h", "tenant": "acme"},
    )
    assert response.status_code == 400, response.content
    assert "callback_url" in response.json()["error"]["details"]
    assert Job.objects.count() == 0
    accepted = jobs.submit(
        kind="noop", input={}, owner=user, tenant=tenant, callback_url="https://a.acme.test/h"
    )
    assert accepted.callback_url == "https://a.acme.test/h"


def test_a_host_taken_off_the_list__the_delivery_fails_at_send_time_without_a_request(
    user: Any, tenant: Tenant, settings: Any
) -> None:
    with callback_receiver() as receiver:
        settings.JOBS_CALLBACK_ALLOWED_HOSTS = {"acme": ["127.0.0.1"]}
        job = jobs.submit(
            kind="noop", input={}, owner=user, tenant=tenant, callback_url=receiver.url
        )
        jobs.execute(job.pk)
        settings.JOBS_CALLBACK_ALLOWED_HOSTS = {"acme": ["hooks.acme.example"]}

        assert callbacks_send_due().failed == 1

        [delivery] = CallbackDelivery.objects.filter(job=job)
        assert delivery.status == "failed"
        assert "JOBS_CALLBACK_ALLOWED_HOSTS" in delivery.last_error
        assert receiver.requests() == []

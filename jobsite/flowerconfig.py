"""Flower's settings (`celery -A jobsite flower --conf=jobsite/flowerconfig.py`).

Flower can revoke tasks and shut workers down: its basic auth comes from FLOWER_BASIC_AUTH,
and with DJANGO_ENV=production Flower refuses to start without a strong one
(jobsite/deploy.py). Development defaults to admin:admin on 127.0.0.1.
"""

from __future__ import annotations

import os
import sys

from django.core.exceptions import ImproperlyConfigured

from jobsite import deploy

try:
    basic_auth = deploy.flower_basic_auth(
        os.environ, production=deploy.environment(os.environ) == "production"
    )
except ImproperlyConfigured as exc:
    print(f"error: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(78) from exc

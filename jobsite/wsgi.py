"""WSGI entry point."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from jobsite.checks import require_static_manifest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
application = get_wsgi_application()
if settings.PRODUCTION:
    # Every page that links a stylesheet would answer 500 (jobsite/checks.py): refuse.
    require_static_manifest()

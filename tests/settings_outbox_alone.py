"""A project with `outbox` and Django's own apps, and no `jobs` (tests/integration/
test_outbox_alone.py): the outbox must migrate and run there, on the database that
JOBS_TEST_OUTBOX_ALONE_DATABASE_URL names."""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "outbox-alone"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.messages",
    "django.contrib.sessions",
    "outbox",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": dj_database_url.parse(os.environ["JOBS_TEST_OUTBOX_ALONE_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

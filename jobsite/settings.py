"""Settings for durable-jobs, read from the environment (twelve-factor)."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_celery_results",
    "jobs",
    "outbox",
    "documents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "jobsite.urls"
WSGI_APPLICATION = "jobsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durable_jobs"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
# Parallel test runs (helpers, CI) each name their own test database.
DATABASES["default"]["TEST"] = {
    "NAME": os.environ.get("JOBS_TEST_DATABASE_NAME", "test_durable_jobs")
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
MEDIA_ROOT = Path(os.environ.get("JOBS_MEDIA_ROOT", str(BASE_DIR / "var" / "media")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LOGIN_URL = "/admin/login/"

# --- Celery: transport only; the database holds job state -------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_IGNORE_RESULT = True  # maintenance tasks opt back in
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_TIME_LIMIT = int(os.environ.get("JOBS_TASK_TIME_LIMIT", "900"))
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("JOBS_TASK_SOFT_TIME_LIMIT", "840"))
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Redis redelivers unacked messages after this; the hard time limit must stay well below it.
    "visibility_timeout": int(os.environ.get("JOBS_VISIBILITY_TIMEOUT", "3600")),
}
# RabbitMQ's consumer_timeout (server side, default 30 min) plays the same role there.
JOBS_RABBITMQ_CONSUMER_TIMEOUT = int(os.environ.get("JOBS_RABBITMQ_CONSUMER_TIMEOUT", "1800"))
CELERY_TASK_DEFAULT_QUEUE = "jobs"
CELERY_TASK_ROUTES = {
    "jobs.execute": {"queue": "jobs"},
    "outbox.*": {"queue": "maintenance"},
    "jobs.maintenance.*": {"queue": "maintenance"},
}

OUTBOX_RELAY_INTERVAL = float(os.environ.get("OUTBOX_RELAY_INTERVAL", "1.0"))
OUTBOX_RELAY_BATCH_SIZE = int(os.environ.get("OUTBOX_RELAY_BATCH_SIZE", "500"))
OUTBOX_RESERVATION_SECONDS = float(os.environ.get("OUTBOX_RESERVATION_SECONDS", "30"))
OUTBOX_FAST_PATH = env_bool("OUTBOX_FAST_PATH", True)
# The fast path's "published" marks are batched per process at this interval (outbox/marks.py);
# 0 marks each publish at once. Must stay far below OUTBOX_RESERVATION_SECONDS.
OUTBOX_MARK_INTERVAL = float(os.environ.get("OUTBOX_MARK_INTERVAL", "0.05"))
OUTBOX_RETENTION_SECONDS = int(os.environ.get("OUTBOX_RETENTION_SECONDS", str(7 * 24 * 3600)))
OUTBOX_PUBLISH_BACKOFF_CAP = float(os.environ.get("OUTBOX_PUBLISH_BACKOFF_CAP", "60"))

JOBS_REAP_INTERVAL = float(os.environ.get("JOBS_REAP_INTERVAL", "5"))
JOBS_RECONCILE_INTERVAL = float(os.environ.get("JOBS_RECONCILE_INTERVAL", "60"))
# Due work with a published message nobody claimed for this long counts as lost by the broker.
JOBS_RECONCILE_STALE_AFTER = float(os.environ.get("JOBS_RECONCILE_STALE_AFTER", "300"))
# Bearer token for Prometheus scrapes of /metrics (empty: staff sessions only).
JOBS_METRICS_TOKEN = os.environ.get("JOBS_METRICS_TOKEN", "")
JOBS_WORKER_HEARTBEAT_INTERVAL = float(os.environ.get("JOBS_WORKER_HEARTBEAT_INTERVAL", "15"))
JOBS_HANDLER_MODULES = env_list("JOBS_HANDLER_MODULES")
JOBS_BUILTIN_HANDLER_MODULES = ["jobs.kinds.builtin", "documents.kinds"]
JOBS_MAX_INPUT_BYTES = int(os.environ.get("JOBS_MAX_INPUT_BYTES", str(64 * 1024)))
JOBS_DEFAULT_LEASE_SECONDS = float(os.environ.get("JOBS_DEFAULT_LEASE_SECONDS", "30"))
JOBS_WORKER_NAME = os.environ.get("JOBS_WORKER_NAME", "")
# The per-job statements as server-side prepared statements (jobs/prepared.py). Turn off
# behind a transaction-mode pooler that does not keep them (PgBouncer before 1.21).
JOBS_PREPARED_STATEMENTS = env_bool("JOBS_PREPARED_STATEMENTS", True)
NOTIFY_PROVIDER_URL = os.environ.get("NOTIFY_PROVIDER_URL", "http://127.0.0.1:8765/notify")
NOTIFY_PROVIDER_TIMEOUT = float(os.environ.get("NOTIFY_PROVIDER_TIMEOUT", "5"))

CELERY_BEAT_SCHEDULE = {
    "outbox-relay": {
        "task": "outbox.relay_tick",
        "schedule": OUTBOX_RELAY_INTERVAL,
        "options": {"expires": max(OUTBOX_RELAY_INTERVAL * 5, 5)},
    },
    "outbox-prune": {"task": "outbox.prune", "schedule": 3600.0},
    "jobs-reap": {
        "task": "jobs.maintenance.reap",
        "schedule": JOBS_REAP_INTERVAL,
        "options": {"expires": max(JOBS_REAP_INTERVAL * 5, 10)},
    },
    "jobs-reconcile": {
        "task": "jobs.maintenance.reconcile",
        "schedule": JOBS_RECONCILE_INTERVAL,
        "options": {"expires": max(JOBS_RECONCILE_INTERVAL * 2, 10)},
    },
}

# --- API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "jobs.api.errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "jobs.api.throttles.UserRateThrottle",
        "jobs.api.throttles.TenantRateThrottle",
    ],
}
# Rates like "600/min" ("off" disables); counted in the default cache (per process unless
# CACHES points at a shared backend).
JOBS_THROTTLE_USER = os.environ.get("JOBS_THROTTLE_USER", "1200/min")
JOBS_THROTTLE_TENANT = os.environ.get("JOBS_THROTTLE_TENANT", "6000/min")
# Several web processes must share their throttle counters: e.g. redis://127.0.0.1:6379/1.
if os.environ.get("JOBS_CACHE_URL"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["JOBS_CACHE_URL"],
        }
    }
JOBS_MAX_OBJECT_BYTES = int(os.environ.get("JOBS_MAX_OBJECT_BYTES", str(10 * 1024 * 1024)))
JOBS_API_MAX_WAIT_SECONDS = float(os.environ.get("JOBS_API_MAX_WAIT_SECONDS", "30"))
JOBS_API_POLL_INTERVAL = float(os.environ.get("JOBS_API_POLL_INTERVAL", "0.25"))
SPECTACULAR_SETTINGS = {
    "TITLE": "durable-jobs API",
    "DESCRIPTION": "Accept work with 202, then read its honest status.",
    "VERSION": "0.1.0",
}

LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "filters": {"redact_payloads": {"()": "jobs.logging.RedactPayloadFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "text",
            "filters": ["redact_payloads"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

"""Settings for durable-jobs, read from the environment (twelve-factor)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dj_database_url
import pythonjsonlogger.core
from psycopg.conninfo import conninfo_to_dict

import jobsite.checks  # noqa: F401  (registers the project's deploy checks)
from jobsite import deploy
from jobsite.envsettings import env_number, library_settings_from_env

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# development (default: `make run`, the tests) or production (Dockerfile, compose.yaml).
# Production refuses a default or weak secret at start-up (jobsite/deploy.py).
DJANGO_ENV = deploy.environment(os.environ)
PRODUCTION = DJANGO_ENV == "production"
SECRET_KEY = deploy.secret_key(os.environ, production=PRODUCTION)
DEBUG = deploy.debug(os.environ, production=PRODUCTION)
ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS",
    "127.0.0.1,localhost" if PRODUCTION else "127.0.0.1,localhost,testserver",
)

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
    "drf_spectacular_sidecar",
    "django_celery_results",
    "jobs",
    "outbox",
    "documents",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS, Swagger UI) from the web process itself, any server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "jobsite.urls"
WSGI_APPLICATION = "jobsite.wsgi.application"
ASGI_APPLICATION = "jobsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# DATABASE_POOL_SIZE > 0: connections from a psycopg pool of that size per process instead
# of persistent ones (which leak under ASGI: each request runs its sync code in a thread of
# its own). jobsite.asgi sets it for the web server.
DATABASE_POOL_SIZE = env_number(os.environ, "DATABASE_POOL_SIZE", 0)


def database_from_url(url: str, **options: Any) -> dj_database_url.DBConfig:
    """dj_database_url.parse, plus libpq's multi-host URL that it refuses (a failover pair:
    postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write): HOST and PORT
    become libpq's comma-separated lists, tried in order (docs/operations.md "PostgreSQL
    failover")."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return dj_database_url.parse(url, **options)
    one_host = urlunsplit(parts._replace(netloc=f"{userinfo}{at}{hosts.split(',', 1)[0]}"))
    config = dj_database_url.parse(one_host, **options)
    libpq = conninfo_to_dict(url)
    config["HOST"], config["PORT"] = str(libpq["host"]), str(libpq.get("port", ""))
    return config


DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durable_jobs"),
        conn_max_age=0
        if DATABASE_POOL_SIZE
        else env_number(os.environ, "DATABASE_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
# Every call is bounded (docs/operations.md "Network timeouts"): a worker cut off from
# PostgreSQL fails its call instead of waiting on a dead TCP connection. Lease arithmetic at
# the defaults: a heartbeat is due every lease/3 (10 s of the 30 s default lease) and gives up
# after at most the 10 s user timeout (or connect timeout + user timeout on a new connection),
# so a cut-off worker learns of it before its lease can expire elsewhere. The user timeout
# counts only unacknowledged bytes and unanswered keepalives: a long query on a live link is
# not cut. A DATABASE_URL query (?connect_timeout=2) wins over these.
DATABASE_TIMEOUTS = {
    "connect_timeout": env_number(os.environ, "DATABASE_CONNECT_TIMEOUT", 5),
    "keepalives": 1,
    "keepalives_idle": env_number(os.environ, "DATABASE_KEEPALIVES_IDLE", 5),
    "keepalives_interval": env_number(os.environ, "DATABASE_KEEPALIVES_INTERVAL", 2),
    "keepalives_count": env_number(os.environ, "DATABASE_KEEPALIVES_COUNT", 3),
    # libpq takes milliseconds; the environment says seconds like the others.
    "tcp_user_timeout": int(env_number(os.environ, "DATABASE_TCP_USER_TIMEOUT", 10.0) * 1000),
}
for _option, _value in DATABASE_TIMEOUTS.items():
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(_option, _value)
if DATABASE_POOL_SIZE:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_SIZE,
        # A request that finds the pool busy for this long fails instead of hanging.
        "timeout": env_number(os.environ, "DATABASE_POOL_TIMEOUT", 10.0),
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
# `manage.py collectstatic` fills it (`make setup`, the Dockerfile); WhiteNoise serves it.
# Production needs it collected with production settings: `check --deploy` and the web
# server refuse a STATIC_ROOT without the manifest (jobsite/checks.py).
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", str(BASE_DIR / "var" / "static")))
# Uploads (/api/objects/) and write-once artifacts: every web and worker process must see the
# same directory (compose.yaml mounts one volume at /app/var/media in all of them).
MEDIA_ROOT = Path(os.environ.get("JOBS_MEDIA_ROOT", str(BASE_DIR / "var" / "media")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production: hashed, compressed names served with a year's cache (needs collectstatic).
    # Development: the files as they are, found in the apps when not collected.
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = not PRODUCTION
LOGIN_URL = "/admin/login/"

# --- HTTPS and proxies: secure by default in production (`manage.py check --deploy`) -------
# Probes and scrapes reach the web process directly over plain HTTP inside the network.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", PRODUCTION)
# A year, subdomains included, preload-ready: lower them (DJANGO_SECURE_HSTS_*) before the
# first production deploy if the domain is shared or not yet HTTPS everywhere.
SECURE_HSTS_SECONDS = env_number(
    os.environ, "DJANGO_SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", PRODUCTION)
# Behind a TLS-terminating proxy: DJANGO_PROXY_SSL_HEADER=X-Forwarded-Proto (the proxy must
# overwrite it), DJANGO_CSRF_TRUSTED_ORIGINS=https://jobs.example.com when the browser's
# origin differs from the Host the app sees, DJANGO_USE_X_FORWARDED_HOST=1 if the proxy
# rewrites Host.
SECURE_PROXY_SSL_HEADER = deploy.proxy_ssl_header(os.environ)
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")
USE_X_FORWARDED_HOST = env_bool("DJANGO_USE_X_FORWARDED_HOST", False)

# --- Celery: transport only; the database holds job state -------------------------------
# The library needs only CELERY_BROKER_URL. `jobs.execute` carries its own acks_late,
# reject_on_worker_lost and time limits, and the library adds its maintenance tasks to beat.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_IGNORE_RESULT = True  # maintenance tasks opt back in
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Reconnection attempts before Celery restarts its consumer (which then tries again from the
# start: a worker waits out any outage); durable-jobs caps the wait between two at 2 s
# (outbox/reconnect.py).
CELERY_BROKER_CONNECTION_MAX_RETRIES = env_number(
    os.environ, "CELERY_BROKER_CONNECTION_MAX_RETRIES", 100
)
# A worker that loses its broker connection lets its running jobs finish (their leases and
# fenced commits hold; the broker redelivers the unacked message, and the claim acks that
# duplicate): Celery 6 plans to make True the default, which would kill them mid-work.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
    # Redis redelivers unacked messages after this; JOBS_TASK_TIME_LIMIT must stay well below.
    "visibility_timeout": env_number(os.environ, "JOBS_VISIBILITY_TIMEOUT", 3600),
    # Bounded calls on a broker that vanishes without closing TCP (Redis; kombu's transport
    # options, read by the workers, beat and the outbox's kept producer alike). A command
    # (publish, ack) waits at most socket_timeout; it must exceed kombu's 1 s BRPOP timeout.
    # The consumer's BRPOP runs in the event loop, where no socket timeout applies: kombu
    # drops it when its reply is overdue by brpop_timeout + health_check_interval (checked
    # every health_check_interval, so within 1 + 2 x 5 s), and TCP keepalives with a user
    # timeout (the database's numbers) end a dead connection in the kernel too.
    "socket_timeout": env_number(os.environ, "CELERY_BROKER_SOCKET_TIMEOUT", 5.0),
    "socket_connect_timeout": env_number(os.environ, "CELERY_BROKER_CONNECT_TIMEOUT", 5.0),
    "health_check_interval": env_number(os.environ, "CELERY_BROKER_HEALTH_CHECK_INTERVAL", 5),
    "socket_keepalive": True,
    "socket_keepalive_options": {
        option: DATABASE_TIMEOUTS[key]
        for name, key in (
            ("TCP_KEEPIDLE", "keepalives_idle"),
            ("TCP_KEEPINTVL", "keepalives_interval"),
            ("TCP_KEEPCNT", "keepalives_count"),
            ("TCP_USER_TIMEOUT", "tcp_user_timeout"),
        )
        if (option := getattr(socket, name, None)) is not None  # Linux has all four
    },
}
# RabbitMQ: AMQP heartbeats every CELERY_BROKER_HEARTBEAT s (Celery's default is 120 s, so a
# vanished server went unnoticed for minutes). Redis ignores it.
CELERY_BROKER_HEARTBEAT = env_number(os.environ, "CELERY_BROKER_HEARTBEAT", 10)

# --- durable-jobs: every JOBS_* / OUTBOX_* setting has a default (docs/operations.md) -------
# This example project lets the environment set any of them (JOBS_TASK_TIME_LIMIT=60, ...).
globals().update(library_settings_from_env(os.environ))
# The example apps' kinds (demo/kinds.py, documents/kinds.py) are found by autodiscovery;
# JOBS_HANDLER_MODULES (comma-separated in the environment) adds more, e.g. the tests' kinds.
NOTIFY_PROVIDER_URL = os.environ.get(
    "NOTIFY_PROVIDER_URL", f"http://127.0.0.1:{os.environ.get('PROVIDER_PORT', '8765')}/notify"
)
NOTIFY_PROVIDER_TIMEOUT = env_number(os.environ, "NOTIFY_PROVIDER_TIMEOUT", 5.0)

# --- Django's Tasks framework on durable jobs (docs/django-tasks.md) ----------------------
TASKS: dict[str, dict[str, Any]] = {"default": {"BACKEND": "jobs.tasks_backend.DurableJobsBackend"}}

# --- API ---------------------------------------------------------------------------------
# The library's API views carry their own authentication, permissions, throttles and error
# handler; this project's REST_FRAMEWORK is not read by them.
# Several web processes must share their throttle counters: e.g. redis://127.0.0.1:6379/1.
if os.environ.get("JOBS_CACHE_URL"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["JOBS_CACHE_URL"],
        }
    }
SPECTACULAR_SETTINGS = {
    "TITLE": "durable-jobs API",
    "DESCRIPTION": "Accept work with 202, then read its honest status.",
    "VERSION": "0.1.0",
    # This project's API is the library's: the deploy check (`check --deploy`) generates it.
    "DEFAULT_GENERATOR_CLASS": "jobs.api.base.LibraryApiSchemaGenerator",
    # Swagger UI and ReDoc from drf-spectacular-sidecar's static files, not a CDN, and no
    # online validator badge: /api/docs/ and /api/redoc/ work without internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
# jobs.logging.JobContextFilter puts the job (id, kind, attempt, generation, worker) on every
# line logged while a worker runs one: as keys in JSON, as `%(job_fields)s` in text.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s%(job_fields)s",
            "defaults": {"job_fields": ""},  # a record that missed the filter still prints
        },
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            # The job's fields are keys of their own; their text form would repeat them.
            "reserved_attrs": [*pythonjsonlogger.core.RESERVED_ATTRS, "job_fields"],
        },
    },
    "filters": {
        "job_context": {"()": "jobs.logging.JobContextFilter"},
        "redact_payloads": {"()": "jobs.logging.RedactPayloadFilter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "text",
            "filters": ["job_context", "redact_payloads"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

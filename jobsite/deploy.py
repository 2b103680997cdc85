"""Development or production: what the example project accepts from its environment.

`DJANGO_ENV=production` (the Dockerfile and compose.yaml set it) turns on the secure
defaults in jobsite.settings and refuses to start on a secret that is a default, a
placeholder or too weak, whichever process loads the settings (web, workers, beat, Flower,
manage.py). Development (`make run`, the tests) needs no environment at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

ENVIRONMENTS = ("development", "production")
DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
DEV_FLOWER_BASIC_AUTH = "admin:admin"
# What Django's deploy check (security.W009) asks of a secret key.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE = 5
FLOWER_PASSWORD_MIN_LENGTH = 12
# Values that appear in this repository's docs or files: never a production secret.
KNOWN_PLACEHOLDERS = frozenset({DEV_SECRET_KEY, "change-me", "changeme", "admin", "password"})
GENERATE_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


class UnsafeProductionSetting(ImproperlyConfigured):
    """Production mode with a default, placeholder or weak secret: the process does not start."""


def environment(environ: Mapping[str, str]) -> str:
    """`DJANGO_ENV`: development (the default) or production."""
    name = environ.get("DJANGO_ENV", "development").strip().lower() or "development"
    if name not in ENVIRONMENTS:
        raise ImproperlyConfigured(f"DJANGO_ENV={name!r}: use one of {', '.join(ENVIRONMENTS)}")
    return name


def secret_key(environ: Mapping[str, str], *, production: bool) -> str:
    """DJANGO_SECRET_KEY; in production it must be set, unique to you and strong."""
    key = environ.get("DJANGO_SECRET_KEY", "")
    if not production:
        return key or DEV_SECRET_KEY
    if not key:
        raise UnsafeProductionSetting(
            f"DJANGO_ENV=production needs DJANGO_SECRET_KEY; generate one: {GENERATE_HINT}"
        )
    if (
        key in KNOWN_PLACEHOLDERS
        or "change-me" in key
        or key.startswith("django-insecure-")
        or len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE
    ):
        raise UnsafeProductionSetting(
            "DJANGO_SECRET_KEY is a placeholder or too weak for DJANGO_ENV=production (at least "
            f"{SECRET_KEY_MIN_LENGTH} characters, {SECRET_KEY_MIN_UNIQUE} distinct, no "
            f"'django-insecure-' prefix); generate one: {GENERATE_HINT}"
        )
    return key


def debug(environ: Mapping[str, str], *, production: bool) -> bool:
    """DJANGO_DEBUG (off by default); never on in production."""
    on = environ.get("DJANGO_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}
    if on and production:
        raise UnsafeProductionSetting(
            "DJANGO_DEBUG is on with DJANGO_ENV=production: debug pages show settings and code"
        )
    return on


def flower_basic_auth(environ: Mapping[str, str], *, production: bool) -> list[str]:
    """FLOWER_BASIC_AUTH (`user:password[,user:password]`); in production set and strong."""
    raw = environ.get("FLOWER_BASIC_AUTH", "")
    if not production:
        return [pair for pair in raw.split(",") if pair] or [DEV_FLOWER_BASIC_AUTH]
    pairs = [pair.strip() for pair in raw.split(",") if pair.strip()]
    if not pairs:
        raise UnsafeProductionSetting(
            "DJANGO_ENV=production needs FLOWER_BASIC_AUTH=user:password for Flower "
            "(Flower can revoke tasks and shut down workers)"
        )
    for pair in pairs:
        user, _, password = pair.partition(":")
        if (
            not user
            or password in KNOWN_PLACEHOLDERS
            or "change-me" in password
            or len(password) < FLOWER_PASSWORD_MIN_LENGTH
        ):
            raise UnsafeProductionSetting(
                f"FLOWER_BASIC_AUTH for {user or '?'!r} is a placeholder or shorter than "
                f"{FLOWER_PASSWORD_MIN_LENGTH} characters; DJANGO_ENV=production refuses it"
            )
    return pairs


def proxy_ssl_header(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """DJANGO_PROXY_SSL_HEADER=X-Forwarded-Proto: the header your TLS proxy sets to `https`.

    Set it only when that proxy is the one way in and overwrites the header: a client that
    reaches the app directly could otherwise claim HTTPS.
    """
    name = environ.get("DJANGO_PROXY_SSL_HEADER", "").strip()
    if not name:
        return None
    return "HTTP_" + name.upper().replace("-", "_"), "https"

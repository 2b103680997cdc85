"""`manage.py jobs_token USER [--tenant T]`: print an API token (creating what is missing)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from jobs.api.services import api_token_issue


class Command(BaseCommand):
    help = "Create USER (and membership of tenant T) if missing and print the user's API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", help="tenant name (a slug); created if missing")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        tenant: str | None = options.get("tenant")
        if not username or len(username) > 150:
            raise CommandError("USER must be 1 to 150 characters")
        try:
            get_user_model().username_validator(username)
        except ValidationError as exc:
            raise CommandError(f"USER {username!r}: {exc.messages[0]}") from None
        if tenant is not None:
            try:
                validate_slug(tenant)
            except ValidationError as exc:
                raise CommandError(f"--tenant {tenant!r}: {exc.messages[0]}") from None
            if len(tenant) > 100:
                raise CommandError("--tenant must be at most 100 characters")
        try:
            token = api_token_issue(username=username, tenant_name=tenant)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(token)

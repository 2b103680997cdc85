"""Handler registry: `@handler("kind.name", version=1, ...)` and the kinds a process knows."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jsonschema
from django.conf import settings

from .exceptions import UnknownKind, ValidationFailed
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .context import JobContext

HandlerFn = Callable[["JobContext", dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class KindSpec:
    """Everything the runtime needs to know about one version of one kind."""

    kind: str
    version: int
    fn: HandlerFn
    policy: RetryPolicy
    lease_seconds: float
    responsible: str
    queue: str = "jobs"
    input_schema: dict[str, Any] | None = None
    tenant_limit: int | None = None
    kind_limit: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Built once: jsonschema.validate() would check the schema itself again on every call.
    validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.input_schema is not None:
            cls = jsonschema.validators.validator_for(self.input_schema)
            cls.check_schema(self.input_schema)
            object.__setattr__(self, "validator", cls(self.input_schema))

    def validate(self, data: Any) -> None:
        if self.validator is None:
            return
        # The most relevant error, as jsonschema.validate() reports it.
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ValidationFailed(f"input does not match {self.kind}: {where}: {error.message}")


_registry: dict[str, dict[int, KindSpec]] = {}


def handler(
    kind: str,
    *,
    version: int = 1,
    max_attempts: int = 5,
    max_elapsed: float = 3600.0,
    lease_seconds: float | None = None,
    base_delay: float = 1.0,
    max_delay: float = 300.0,
    retry_unknown: bool = True,
    responsible: str = "operators",
    queue: str = "jobs",
    input_schema: dict[str, Any] | None = None,
    tenant_limit: int | None = None,
    kind_limit: int | None = None,
) -> Callable[[HandlerFn], HandlerFn]:
    """Register `fn(ctx, input) -> dict` as the handler of `kind` at `version`."""
    if input_schema is not None:
        jsonschema.Draft202012Validator.check_schema(input_schema)

    def register(fn: HandlerFn) -> HandlerFn:
        spec = KindSpec(
            kind=kind,
            version=version,
            fn=fn,
            policy=RetryPolicy(
                max_attempts=max_attempts,
                max_elapsed=max_elapsed,
                base_delay=base_delay,
                max_delay=max_delay,
                retry_unknown=retry_unknown,
            ),
            lease_seconds=lease_seconds or settings.JOBS_DEFAULT_LEASE_SECONDS,
            responsible=responsible,
            queue=queue,
            input_schema=input_schema,
            tenant_limit=tenant_limit,
            kind_limit=kind_limit,
        )
        _registry.setdefault(kind, {})[version] = spec
        return fn

    return register


def kind_latest(kind: str) -> KindSpec:
    """The newest version of `kind` this process knows (what submissions record)."""
    versions = _registry.get(kind)
    if not versions:
        raise UnknownKind(f"unknown job kind {kind!r}")
    return versions[max(versions)]


def kind_latest_or_none(kind: str) -> KindSpec | None:
    versions = _registry.get(kind)
    return versions[max(versions)] if versions else None


def kind_version(kind: str, version: int) -> KindSpec | None:
    """The exact version, or None when this process cannot run it (a rolling deploy)."""
    return _registry.get(kind, {}).get(version)


def kinds() -> list[str]:
    return sorted(_registry)


def unregister(kind: str) -> None:
    """Forget a kind (tests)."""
    _registry.pop(kind, None)


def autoload() -> None:
    """Import built-in kinds and every module in JOBS_HANDLER_MODULES."""
    for module in [*settings.JOBS_BUILTIN_HANDLER_MODULES, *settings.JOBS_HANDLER_MODULES]:
        importlib.import_module(module)

"""Every `JOBS_*` setting with its default, read in one place: `jobs_settings.QUEUE`.

A project sets none of them to start; docs/operations.md lists them all (from
`jobs_settings.reference()`). Wrong types and bad combinations are system-check errors.
The beat tasks' queue and schedule switch are the outbox's (OUTBOX_MAINTENANCE_QUEUE,
OUTBOX_BEAT_SCHEDULE): one knob for all five maintenance tasks.
"""

from __future__ import annotations

from typing import Any

from outbox.conf import AppSettings, Setting


class SecretSetting[T](Setting[T]):
    """A setting that holds secrets: a problem with it never quotes its value."""

    def problem(self, value: object) -> str | None:
        if not isinstance(value, type(self.default)):
            return f"must be a {type(self.default).__name__}, got {type(value).__name__}"
        return None


class JobsSettings(AppSettings):
    prefix = "JOBS_"

    AUTODISCOVER_KINDS: Setting[bool] = Setting(
        True, "Import the `kinds` module of every installed app at start-up (as admin.py)."
    )
    HANDLER_MODULES: Setting[list[str]] = Setting(
        [], "More modules imported at start-up by web and worker; they register kinds."
    )
    QUEUE: Setting[str] = Setting(
        "jobs", "The Celery queue of `jobs.execute` unless a kind names its own."
    )
    TASK_TIME_LIMIT: Setting[int] = Setting(
        900,
        "Hard time limit of one delivery of `jobs.execute` (seconds); must stay well below "
        "the broker's redelivery window.",
        positive=True,
    )
    TASK_SOFT_TIME_LIMIT: Setting[int] = Setting(
        840, "Soft time limit of `jobs.execute` (below the hard one).", positive=True
    )
    BATCH_BUDGET_SECONDS: Setting[float] = Setting(
        5.0,
        "A batch message starts no handler after this long; the jobs left are given back "
        "uncharged (also added to `jobs.execute_many`'s time limits).",
        positive=True,
    )
    RABBITMQ_CONSUMER_TIMEOUT: Setting[float] = Setting(
        1800.0,
        "RabbitMQ's consumer_timeout as your server sets it (its redelivery window).",
        positive=True,
    )
    DEFAULT_LEASE_SECONDS: Setting[float] = Setting(
        30.0, "Lease of a kind that names none.", positive=True
    )
    MAX_INPUT_BYTES: Setting[int] = Setting(
        64 * 1024, "Largest JSON input of one job.", positive=True
    )
    MAX_INPUT_DEPTH: Setting[int] = Setting(
        64,
        "Deepest nesting of arrays and objects in a job's input (an API body may nest one "
        "level more); keep it far below Python's recursion limit.",
        positive=True,
    )
    MAX_OBJECT_BYTES: Setting[int] = Setting(
        10 * 1024 * 1024, "Largest upload to /api/objects/.", positive=True
    )
    REAP_INTERVAL: Setting[float] = Setting(
        5.0, "Seconds between reaper runs (beat).", positive=True
    )
    RECONCILE_INTERVAL: Setting[float] = Setting(
        60.0, "Seconds between reconciler runs (beat).", positive=True
    )
    RETENTION_SECONDS: Setting[float] = Setting(
        24 * 3600.0,
        "Succeeded, failed and cancelled jobs finished longer ago are deleted with their "
        "events, ledger entries and callbacks (jobs.retention); also the idempotency window: "
        "a replay of a pruned job's key is a new job. 0 keeps every job.",
        minimum=0,
    )
    PRUNE_INTERVAL: Setting[float] = Setting(
        60.0, "Seconds between the pruner's runs (beat).", positive=True
    )
    PRUNE_BATCH: Setting[int] = Setting(
        500, "Finished jobs one pruner transaction deletes at most.", positive=True
    )
    RECONCILE_STALE_AFTER: Setting[float] = Setting(
        300.0,
        "Due work with a published message nobody claimed for this long counts as lost.",
        positive=True,
    )
    REDELIVER_INTERVAL: Setting[float] = Setting(
        2.0,
        "Seconds between redelivery checks (beat): published due work nobody claimed "
        "within its delivery deadline is published again (jobs.redeliver).",
        positive=True,
    )
    DELIVERY_DEADLINE_MIN: Setting[float] = Setting(
        5.0,
        "Shortest delivery deadline (seconds): an idle system republishes a lost message "
        "this long after its publish.",
        positive=True,
    )
    DELIVERY_DEADLINE_FACTOR: Setting[float] = Setting(
        2.0,
        "The deadline is this many times the backlog's drain time (backlog / completions "
        "per second), the largest measured since the message was published.",
        positive=True,
    )
    DELIVERY_DEADLINE_MAX: Setting[float] = Setting(
        300.0,
        "Longest delivery deadline (seconds), also when the drain time is unknown.",
        positive=True,
    )
    REDELIVER_BATCH: Setting[int] = Setting(
        500, "Most jobs one redelivery check publishes again.", positive=True
    )
    WORKER_HEARTBEAT_INTERVAL: Setting[float] = Setting(
        15.0, "How often a worker records that it is alive (/ops/).", positive=True
    )
    WORKER_DB_PROBE_INTERVAL: Setting[float] = Setting(
        1.0,
        "A worker that stopped consuming because the database was unreachable tries a "
        "fresh connection this often, and consumes again once one answers.",
        positive=True,
    )
    WORKER_NAME: Setting[str] = Setting(
        "",
        "The worker's name in leases, /ops/ and logs; empty: the Celery node name "
        "(`celery@host`, as Flower shows it), or the host name outside a worker.",
    )
    ACCEPT_GROUP_MAX: Setting[int] = Setting(
        50,
        "Most plain submits of one process that share a commit when they arrive together "
        "(jobs.accept_group); 1: every submit commits alone.",
        minimum=1,
    )
    PREPARED_STATEMENTS: Setting[bool] = Setting(
        True,
        "The per-job statements as server-side prepared statements; turn off behind "
        "PgBouncer older than 1.22 in transaction mode.",
    )
    METRICS_TOKEN: Setting[str] = Setting(
        "", "Bearer token for Prometheus scrapes of /metrics (empty: staff sessions only)."
    )
    THROTTLE_USER: Setting[str] = Setting("1200/min", 'Per-user API rate ("off" disables).')
    THROTTLE_TENANT: Setting[str] = Setting("6000/min", 'Per-tenant API rate ("off" disables).')
    API_MAX_WAIT_SECONDS: Setting[float] = Setting(
        30.0, "Longest `?wait=` long-poll of GET /api/jobs/<id>/.", minimum=0
    )
    API_POLL_INTERVAL: Setting[float] = Setting(
        0.25, "How often a long-poll reads the job again.", positive=True
    )
    SCHEDULES: Setting[dict[str, dict[str, Any]]] = Setting(
        {},
        "Periodic schedules of kinds defined elsewhere: {name: {kind, cron, timezone, "
        "catch_up, catch_up_seconds, input}} (as `@handler(schedule=...)` takes them).",
    )
    SCHEDULE_INTERVAL: Setting[float] = Setting(
        5.0,
        "Seconds between the ticker's runs (beat): a tick's job is submitted at most this "
        "long after its time.",
        positive=True,
    )
    SCHEDULE_OWNER: Setting[str] = Setting(
        "jobs-scheduler",
        "Username that owns the jobs of periodic schedules (created on first use, with no "
        "password and no staff rights).",
    )

    CALLBACK_SECRETS: Setting[dict[str, str | list[str]]] = SecretSetting(
        {},
        "Signing secrets of completion callbacks by tenant name ('' for jobs without a "
        "tenant): a `whsec_<base64>` secret or a list of them, newest first; each is used to "
        "sign (rotation). A job whose tenant has none cannot name a callback_url.",
    )
    CALLBACK_ALLOW_HTTP: Setting[bool] = Setting(
        False, "Accept http:// callback URLs (https:// only by default)."
    )
    CALLBACK_ALLOWED_HOSTS: Setting[dict[str, list[str]]] = Setting(
        {},
        "Hosts each tenant's callbacks may go to, by tenant name ('' for jobs without a "
        "tenant): a host name, or '.example.com' for it and its subdomains; checked at submit "
        "and again at send time. A tenant without an entry may name any host that passes the "
        "address checks.",
    )
    CALLBACK_ALLOWED_NETWORKS: Setting[list[str]] = Setting(
        [],
        "Networks (CIDR) a callback may reach although they are not public (loopback, "
        "private, link-local...): refused by default.",
    )
    CALLBACK_INTERVAL: Setting[float] = Setting(
        1.0, "Seconds between the callback sender's runs (beat).", positive=True
    )
    CALLBACK_TIMEOUT: Setting[float] = Setting(
        10.0, "Longest time of one callback attempt, connect to answer (seconds).", positive=True
    )
    CALLBACK_MAX_ATTEMPTS: Setting[int] = Setting(
        12, "Attempts of one callback delivery before it fails.", positive=True
    )
    CALLBACK_MAX_ELAPSED: Setting[float] = Setting(
        86400.0,
        "Seconds after a job's end past which its callback is not retried.",
        positive=True,
    )
    CALLBACK_BASE_DELAY: Setting[float] = Setting(
        5.0, "Backoff of a callback's first retry (full jitter, doubling).", positive=True
    )
    CALLBACK_MAX_DELAY: Setting[float] = Setting(
        3600.0, "Cap of a callback's retry backoff (seconds).", positive=True
    )
    CALLBACK_BATCH: Setting[int] = Setting(
        20, "Deliveries one sender run claims and sends at once.", positive=True
    )


jobs_settings = JobsSettings()

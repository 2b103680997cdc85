"""What the demo checked and counted, and how it shows it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table


@dataclass
class Check:
    drill: str
    expectation: str
    ok: bool
    detail: str = ""


@dataclass
class Accounting:
    accepted: int
    succeeded: int
    quarantined: int
    attempts: int
    duplicate_deliveries: int
    duplicate_effects: int
    effects_reused: int
    stale_writes_rejected: int
    notices_sent: int

    def line(self) -> str:
        return (
            f"accounting: accepted={self.accepted} succeeded={self.succeeded} "
            f"quarantined={self.quarantined} attempts={self.attempts} "
            f"duplicate_deliveries={self.duplicate_deliveries} "
            f"duplicate_effects={self.duplicate_effects}"
        )


@dataclass
class DemoReport:
    checks: list[Check] = field(default_factory=list)
    accounting: Accounting | None = None
    logs: Path | None = None

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]


def accounting_table(accounting: Accounting) -> Table:
    table = Table(title="accounting (from the database, the source of truth)")
    table.add_column("what")
    table.add_column("count", justify="right")
    rows = [
        ("accepted", accounting.accepted),
        ("succeeded", accounting.succeeded),
        ("quarantined (waiting for an operator)", accounting.quarantined),
        ("attempts (deliveries that ran the handler)", accounting.attempts),
        ("duplicate deliveries (acked without running)", accounting.duplicate_deliveries),
        ("stale writes rejected (fencing)", accounting.stale_writes_rejected),
        ("effects reused from the ledger", accounting.effects_reused),
        ("notices the provider created", accounting.notices_sent),
        ("duplicate effects", accounting.duplicate_effects),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


WHERE_NEXT = """\
Where to look next (start the full service with `make run`):
  admin        http://127.0.0.1:8000/admin/   jobs, events, effect ledger, quarantine
  ops page     http://127.0.0.1:8000/ops/     backlog, oldest job, expired leases, quarantine
  Flower       http://127.0.0.1:5555          what the broker's events showed (in memory)
  metrics      http://127.0.0.1:8000/metrics  jobs_* counters for Prometheus
  the model    manage.py jobs_simulate --help  size workers for a burst before production
The demo's jobs (owner "demo") are rows in DATABASE_URL's database: admin and /ops/ show them
when `make run` uses the same database. Flower does not: they went through the demo's private
broker, and Flower only knows the events it saw."""

"""deploy/prometheus and deploy/grafana as Prometheus and Grafana read them.

promtool checks the configuration and the rules and runs the rules' unit tests
(deploy/prometheus/alerts_test.yml); the alerts agree with the table in docs/operations.md;
every expression (alerts and dashboard panels) names only metrics a real /metrics exports;
and a real Prometheus scrapes a live server's /metrics with the bearer token, reads the values
this test caused, loads the rules and moves the alerts of the faults this test causes (a stale
write: firing; accepted work no relay publishes, a quarantined job, no live worker: pending)
while the others stay quiet. Prometheus and promtool come from Debian's `prometheus` package
(scripts/ensure-prometheus.sh, run by `make test`); without them these tests fail, not skip.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

import jobs
from jobs.claims import job_claim
from jobs.exceptions import LeaseLost
from jobs.lifecycle import job_complete
from jobs.models import Job
from jobs.runtime import Outcome, execute
from tests.harness import ROOT, wait_until

# Only the tests that scrape /metrics touch the database.
needs_database = pytest.mark.django_db(transaction=True)

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "durable-jobs.json"
OPERATIONS = ROOT / "docs" / "operations.md"
SCRAPE_JOB = "durable-jobs"
TOKEN = "prometheus-scrape-token-29"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_METRIC = re.compile(r"\b(?:jobs_[a-z0-9_]+|up)\b")
_GRAFANA_VARIABLE = re.compile(r"\$(?:__rate_interval|__interval|__range)\b")


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is not on PATH: run scripts/ensure-prometheus.sh "
            "(Debian: apt-get install prometheus); `make test` runs it"
        )
    return found


def run(*argv: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def alert_rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (label values and strings left out)."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))


def as_instant(expr: str) -> str:
    """A dashboard expression with Grafana's range variables replaced, as Prometheus takes it."""
    return _GRAFANA_VARIABLE.sub("5m", expr)


def exported_names(exposition: str) -> set[str]:
    """Every sample name /metrics can carry, also of families without a sample yet."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
        names.update(sample.name for sample in family.samples)
    return names


def scrape(settings: Any) -> str:
    settings.JOBS_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    return response.content.decode()


def github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def operations_anchors() -> set[str]:
    headings = re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.MULTILINE)
    return {github_anchor(h) for h in headings}


def operations_alert_table() -> dict[str, tuple[str, str]]:
    """{alert: (PromQL, for)} of the rows of "Alerts and what they mean" that name an alert."""
    section = OPERATIONS.read_text().split("### Alerts and what they mean", 1)[1]
    section = section.split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`Jobs\w+`", cells[0]):
            rows[cells[0].strip("`")] = (cells[1].strip("`"), cells[2])
    return rows


# -- promtool -------------------------------------------------------------------------------


def test_config_and_rules_are_valid__promtool_check(tmp_path: Path) -> None:
    promtool = tool("promtool")
    run(promtool, "check", "config", "--syntax-only", str(CONFIG))
    # The full check also opens the token file and the rule files: a copy that points at ours.
    config = prometheus_config(target="web:8000", token_file=tmp_path / "token", interval="15s")
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    out = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert f"SUCCESS: {len(alert_rules())} rules found" in out
    out = run(promtool, "check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(alert_rules())} rules found" in out


def test_every_alert_fires_on_its_fault_and_stays_quiet_otherwise__promtool_test_rules() -> None:
    out = run(tool("promtool"), "test", "rules", ALERTS_TEST.name, cwd=PROMETHEUS_DIR)
    assert "SUCCESS" in out
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fires == quiet == set(alert_rules())


def test_every_alert_has_for_severity_summary_and_a_runbook_that_exists__alerts_yml() -> None:
    anchors = operations_anchors()
    for name, rule in alert_rules().items():
        assert "for" in rule, name
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, (name, anchor)


def test_alerts_agree_with_the_table__docs_operations() -> None:
    table = operations_alert_table()
    rules = alert_rules()
    assert set(table) == set(rules)
    for name, rule in rules.items():
        assert table[name] == (rule["expr"], rule["for"]), name


@needs_database
def test_alerts_and_dashboard_name_only_exported_metrics__real_scrape(settings: Any) -> None:
    exported = exported_names(scrape(settings))
    assert {"jobs_accepted_total", "jobs_incompatible_deployment_total"} <= exported
    exprs = [rule["expr"] for rule in alert_rules().values()] + dashboard_exprs()
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported | {"up"}, (expr, names - exported)


def test_dashboard_exprs_parse__promtool(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    rules = [{"record": f"dashboard:expr_{n}", "expr": as_instant(e)} for n, e in enumerate(exprs)]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = run(tool("promtool"), "check", "rules", str(path))
    assert f"SUCCESS: {len(exprs)} rules found" in out


def test_dashboard_imports_cleanly__ids_layout_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "durable-jobs" and "__inputs" not in dashboard
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        taken = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not taken & cells, f"{panel['title']} overlaps another panel"
        cells |= taken
        if panel["type"] == "row":
            continue
        assert panel["targets"] and panel["description"], panel["title"]
        for source in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert source == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = " ".join(panel["title"].lower() for panel in panels)
    for topic in (
        "acceptance vs completion",
        "backlog",
        "oldest queued",
        "outbox lag",
        "leases expired",
        "stale writes rejected",
        "duplicate deliveries vs duplicate effects",
        "quarantine",
        "latency",
    ):
        assert topic in titles, topic


# -- a real Prometheus ----------------------------------------------------------------------


def prometheus_config(*, target: str, token_file: Path, interval: str) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with only the target, token file and pace changed."""
    config = yaml.safe_load(CONFIG.read_text())
    config["global"].update(scrape_interval=interval, evaluation_interval=interval)
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == SCRAPE_JOB
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_timeout"] = interval
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Prometheus:
    url: str

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def value(self, query: str) -> float | None:
        """The one sample of an instant query, or None when it has none."""
        result = self.api("query", query=query)["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alert_states(self) -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in self.api("alerts")["alerts"]}

    def target_up(self) -> bool:
        targets = self.api("targets")["activeTargets"]
        return any(t["labels"]["job"] == SCRAPE_JOB and t["health"] == "up" for t in targets)


@pytest.fixture
def prometheus(live_server: Any, settings: Any) -> Iterator[Prometheus]:
    """A real Prometheus scraping the live server's /metrics every second with the token."""
    yield from _prometheus(live_server, settings, pending_for=None)


# Every `for:` of the time-scaled rules: long enough for two evaluations at 1 s.
SCALED_FOR = "3s"


@pytest.fixture
def prometheus_scaled(live_server: Any, settings: Any) -> Iterator[Prometheus]:
    """The same, evaluating a copy of alerts.yml whose every `for:` is SCALED_FOR: the same
    expressions on the same real series, so a fault's alert fires within a test's patience
    (the real durations are promtool's unit tests: alerts_test.yml)."""
    yield from _prometheus(live_server, settings, pending_for=SCALED_FOR)


def _prometheus(
    live_server: Any, settings: Any, *, pending_for: str | None
) -> Iterator[Prometheus]:
    settings.JOBS_METRICS_TOKEN = TOKEN
    binary = tool("prometheus")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
    token_file = workdir / "token"
    token_file.write_text(TOKEN)
    target = urllib.parse.urlsplit(live_server.url).netloc
    config = prometheus_config(target=target, token_file=token_file, interval="1s")
    if pending_for is not None:
        rules = yaml.safe_load(ALERTS.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = pending_for
        (workdir / ALERTS.name).write_text(yaml.safe_dump(rules))
        config["rule_files"] = [str(workdir / ALERTS.name)]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: _ready(server.url, process), timeout=30, what="prometheus ready")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _ready(url: str, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"prometheus exited with {process.returncode}"
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stale_write(user: Any) -> None:
    """A worker completes after its lease was taken over: its write is refused (counted)."""
    raced = jobs.submit(kind="noop", input={"n": "raced"}, owner=user)
    old = job_claim(raced, worker="old:1", lease_seconds=30)
    assert old is not None
    Job.objects.filter(pk=raced.pk).update(lease_until=timezone.now() - timedelta(minutes=5))
    new = job_claim(Job.objects.get(pk=raced.pk), worker="new:1", lease_seconds=30)
    assert new is not None
    with pytest.raises(LeaseLost):
        job_complete(old, result={"stale": True}, local_effects=[])
    job_complete(new, result={"ok": True}, local_effects=[])


@needs_database
def test_real_prometheus_scrapes_values_and_moves_the_alerts_of_real_faults(
    prometheus: Prometheus, user: Any, settings: Any
) -> None:
    # No relay runs and the fast path is off: accepted work stays in the outbox.
    settings.OUTBOX_FAST_PATH = False
    done = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    assert execute(done.pk).outcome is Outcome.SUCCEEDED
    poison = jobs.submit(kind="drill.malformed", input={"document_id": "x"}, owner=user)
    assert execute(poison.pk).outcome is Outcome.QUARANTINED

    wait_until(prometheus.target_up, timeout=30, what="a successful scrape")
    wait_until(
        lambda: prometheus.value('jobs_quarantined{job="durable-jobs"}') == 1,
        timeout=30,
        what="a scrape that saw the quarantined job",
    )
    assert prometheus.value("jobs_stale_writes_rejected_total") == 0
    _stale_write(user)  # after a scrape that saw 0, so `increase` sees the step
    wait_until(
        lambda: prometheus.value("jobs_stale_writes_rejected_total") == 1,
        timeout=30,
        what="the stale write in a scrape",
    )
    assert prometheus.value("jobs_accepted_total") == 3
    assert prometheus.value('jobs_completed_total{outcome="succeeded"}') == 2
    assert prometheus.value('jobs_completed_total{outcome="quarantined"}') == 1
    assert prometheus.value("jobs_outbox_pending") == 3  # one outbox row per job, none sent
    assert prometheus.value("jobs_relay_published_total") == 0
    assert prometheus.value("jobs_workers_seen") == 0
    assert prometheus.value("jobs_duplicate_effects_total") == 0
    assert prometheus.value('up{job="durable-jobs"}') == 1

    # The rules load, evaluate without error, and the faults move exactly their alerts.
    expected = {
        "JobsStaleWritesRejected": "firing",  # for: 0m
        "JobsRelayNotPublishing": "pending",  # for: 5m
        "JobsQuarantineWaiting": "pending",  # for: 1h
        "JobsNoLiveWorker": "pending",  # for: 2m
    }
    wait_until(
        lambda: prometheus.alert_states() == expected,
        timeout=30,
        what=f"alert states {expected}",
    )
    (group,) = prometheus.api("rules")["groups"]
    assert {rule["name"] for rule in group["rules"]} == set(alert_rules())
    assert {rule["health"] for rule in group["rules"]} == {"ok"}, group["rules"]
    assert group["file"] == str(ALERTS)

    # Every sample name this scrape carries is one the alerts and the dashboard may name, and
    # every dashboard expression is a query the real engine answers.
    scraped = set(prometheus.api("label/__name__/values"))
    assert {"jobs_accepted_total", "jobs_backlog", "jobs_latency_seconds"} <= scraped
    for expr in dashboard_exprs():
        names = metric_names(expr) - {"up"}
        assert names <= scraped | {"jobs_incompatible_deployment_total"}, (expr, names - scraped)
        prometheus.api("query", query=as_instant(expr))


@needs_database
def test_relay_stopped_and_a_poison_job__their_alerts_fire__scaled_for(
    prometheus_scaled: Prometheus, user: Any, settings: Any
) -> None:
    """The relay is stopped with work accepted (no relay runs, the fast path is off) and a
    poison job is quarantined: JobsRelayNotPublishing and JobsQuarantineWaiting fire once
    their `for:` has passed; so does JobsNoLiveWorker (no worker runs). No other alert leaves
    inactive."""
    settings.OUTBOX_FAST_PATH = False
    jobs.submit(kind="noop", input={"n": 1}, owner=user)
    poison = jobs.submit(kind="drill.malformed", input={"document_id": "x"}, owner=user)
    assert execute(poison.pk).outcome is Outcome.QUARANTINED
    wait_until(prometheus_scaled.target_up, timeout=30, what="a successful scrape")

    expected = {
        "JobsRelayNotPublishing": "firing",
        "JobsQuarantineWaiting": "firing",
        "JobsNoLiveWorker": "firing",
    }
    wait_until(
        lambda: prometheus_scaled.alert_states() == expected,
        timeout=30,
        what=f"alert states {expected}",
    )
    (group,) = prometheus_scaled.api("rules")["groups"]
    assert {rule["health"] for rule in group["rules"]} == {"ok"}, group["rules"]
    assert {rule["duration"] for rule in group["rules"]} == {3.0}

"""compose.yaml, the Dockerfile, the Procfile and deploy/ read as Docker and honcho read them
(no container runtime runs here): services, healthchecks, restart policies, shared volumes,
the rabbitmq profile's broker, production settings and the ports' variables."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
RABBITMQ_ENV = ROOT / "deploy" / "rabbitmq.env"
SECRETS = {"DJANGO_SECRET_KEY": "k" * 60, "FLOWER_BASIC_AUTH": "ops:a-long-password"}
ONE_SHOT = {"migrate"}
_VARIABLE = re.compile(r"\$(?:\$|\{(\w+)(?:(:?[-?])([^}]*))?\}|(\w+))")


class MissingVariable(LookupError):
    pass


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, $VAR and $$."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3)
        value = env.get(name)
        if operator in (":-", ":?") and not value:
            value = None
        if value is not None:
            return value
        if operator and operator.endswith("?"):
            raise MissingVariable(f"{name}: {argument}")
        return argument if operator else ""

    return _VARIABLE.sub(replace, text)


def read_env_file(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    found = dict(env)
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            found[name.strip()] = interpolate(value.strip(), found)
    return found


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolve(item, env) for item in node]
    if isinstance(node, dict):
        return {key: resolve(value, env) for key, value in node.items()}
    return node


def compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<` merge keys
    return dict(resolve(loaded, SECRETS if env is None else env))


def services(config: dict[str, Any], profiles: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {
        name: spec
        for name, spec in config["services"].items()
        if not spec.get("profiles") or set(spec["profiles"]) & profiles
    }


def app_services(config: dict[str, Any]) -> dict[str, Any]:
    """The services built from this repository's image."""
    return {name: spec for name, spec in config["services"].items() if "build" in spec}


def command_of(spec: dict[str, Any]) -> str:
    command = spec.get("command") or dockerfile_cmd()
    return " ".join(command) if isinstance(command, list) else str(command)


def dockerfile_text() -> str:
    return (ROOT / "Dockerfile").read_text()


def dockerfile_cmd() -> list[str]:
    (line,) = [ln for ln in dockerfile_text().splitlines() if ln.startswith("CMD ")]
    return list(json.loads(line.removeprefix("CMD ")))


def dockerfile_env() -> dict[str, str]:
    text = dockerfile_text().replace("\\\n", " ")
    return {
        name: value
        for line in text.splitlines()
        if line.startswith("ENV ")
        for name, value in re.findall(r"(\w+)=(\S+)", line)
    }


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


# -- compose.yaml ---------------------------------------------------------------------------


def test_every_long_running_service_restarts_and_reports_health__compose() -> None:
    config = compose()
    for name, spec in services(config, frozenset({"rabbitmq", "observability"})).items():
        if name in ONE_SHOT:
            assert spec.get("restart") == "no", name
            continue
        assert spec.get("restart") in {"unless-stopped", "always"}, name
        test = spec.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1, name
        assert not spec["healthcheck"].get("disable"), name


def test_the_stack_has_every_role__compose_and_procfile() -> None:
    config = compose()
    commands = {name: command_of(spec) for name, spec in app_services(config).items()}
    assert {"migrate", "web", "worker", "maintenance", "beat", "flower", "provider"} <= set(
        commands
    )
    assert "--queues=jobs " in commands["worker"] + " "
    assert "--queues=jobs.maintenance" in commands["maintenance"]
    beats = [name for name, command in commands.items() if " beat " in f" {command} "]
    assert beats == ["beat"], "exactly one beat"
    assert set(procfile()) <= set(commands)


def test_web_and_every_worker_share_one_media_volume__uploads_and_artifacts() -> None:
    config = compose()
    assert "media" in config["volumes"]
    for name in ("web", "worker", "maintenance"):
        spec = config["services"][name]
        root = spec["environment"]["JOBS_MEDIA_ROOT"]
        assert f"media:{root}" in spec["volumes"], name
        assert root == dockerfile_env()["JOBS_MEDIA_ROOT"]
    # And the database and the broker keep their data across container restarts.
    assert any(v.startswith("pgdata:") for v in config["services"]["postgres"]["volumes"])
    assert any(v.startswith("redisdata:") for v in config["services"]["redis"]["volumes"])


@pytest.mark.parametrize("password", [None, "rabbit-s3cret"])
def test_rabbitmq_profile_switches_the_broker__env_file(password: str | None) -> None:
    given = {**SECRETS, **({"RABBITMQ_PASSWORD": password} if password else {})}
    env = read_env_file(RABBITMQ_ENV, given)
    assert "rabbitmq" in env["COMPOSE_PROFILES"].split(",")
    config = compose(env)
    rabbit = config["services"]["rabbitmq"]
    assert rabbit["profiles"] == ["rabbitmq"]
    user, password = (
        rabbit["environment"]["RABBITMQ_DEFAULT_USER"],
        rabbit["environment"]["RABBITMQ_DEFAULT_PASS"],
    )
    for name, spec in app_services(config).items():
        assert spec["environment"]["CELERY_BROKER_URL"] == (
            f"amqp://{user}:{password}@rabbitmq:5672//"
        ), name
        dependency = spec["depends_on"]["rabbitmq"]
        assert dependency["condition"] == "service_healthy", name
        assert dependency["required"] is False, name  # ignored without the profile
    assert password is None or password in rabbit["environment"]["RABBITMQ_DEFAULT_PASS"]
    # Without the env file: Redis, and RabbitMQ is not started.
    default = compose()
    brokers = {spec["environment"]["CELERY_BROKER_URL"] for spec in app_services(default).values()}
    assert brokers == {"redis://redis:6379/0"}
    assert "rabbitmq" not in services(default)


def test_production_settings_and_no_default_secret__compose() -> None:
    config = compose()
    for name, spec in app_services(config).items():
        env = spec["environment"]
        assert env["DJANGO_ENV"] == "production", name
        assert env["DJANGO_SECRET_KEY"] == SECRETS["DJANGO_SECRET_KEY"], name
        assert env["DJANGO_PROXY_SSL_HEADER"] == "X-Forwarded-Proto", name
    for missing in SECRETS:
        with pytest.raises(MissingVariable, match=missing):
            compose({k: v for k, v in SECRETS.items() if k != missing})


def test_only_the_tls_proxy_is_published_for_web__compose_and_caddyfile() -> None:
    config = compose()
    web, proxy = config["services"]["web"], config["services"]["proxy"]
    assert "ports" not in web  # plain HTTP stays inside the network
    assert proxy["ports"] == ["127.0.0.1:8443:8443"]
    bind = dockerfile_cmd()[dockerfile_cmd().index("--bind") + 1]
    port = bind.rsplit(":", 1)[1]
    assert f"127.0.0.1:{port}/healthz" in " ".join(web["healthcheck"]["test"])
    caddyfile = (ROOT / "deploy" / "Caddyfile").read_text()
    assert f"reverse_proxy {{$WEB_UPSTREAM:web:{port}}}" in caddyfile
    assert "https://127.0.0.1:8443" in caddyfile and "skip_install_trust" in caddyfile
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]
    for name, spec in config["services"].items():
        for published in spec.get("ports", []):
            assert published.startswith("127.0.0.1:"), (name, published)


def bind_mounts(spec: dict[str, Any]) -> dict[str, str]:
    """{container path: repository path} of a service's `./...` volumes."""
    mounts = {}
    for volume in spec.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = source
    return mounts


def test_observability_profile_mounts_the_rules_and_the_dashboard__compose() -> None:
    env = {**SECRETS, "JOBS_METRICS_TOKEN": "scrape-token", "GRAFANA_ADMIN_PASSWORD": "pw"}
    config = compose(env)
    assert not {"prometheus", "grafana"} & set(services(config))  # only with the profile
    observed = services(config, frozenset({"observability"}))
    prometheus, grafana = observed["prometheus"], observed["grafana"]
    for spec in (prometheus, grafana):
        assert spec["profiles"] == ["observability"]
        for source in bind_mounts(spec).values():
            assert (ROOT / source).exists(), source
    # Prometheus: its config and every rule file it names, the token web accepts.
    mounts = bind_mounts(prometheus)
    config_path = "/etc/prometheus/prometheus.yml"
    assert mounts[config_path] == "./deploy/prometheus/prometheus.yml"
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    for rule_file in scrape["rule_files"]:
        assert mounts[f"/etc/prometheus/{rule_file}"] == f"./deploy/prometheus/{rule_file}"
    entrypoint = " ".join(prometheus["entrypoint"])
    assert f"--config.file={config_path}" in entrypoint
    (job,) = scrape["scrape_configs"]
    token_file = job["authorization"]["credentials_file"]
    assert f'printf %s "$JOBS_METRICS_TOKEN" > {token_file}' in entrypoint
    assert prometheus["environment"]["JOBS_METRICS_TOKEN"] == "scrape-token"
    for name, spec in app_services(config).items():
        assert spec["environment"]["JOBS_METRICS_TOKEN"] == "scrape-token", name
    port = dockerfile_cmd()[dockerfile_cmd().index("--bind") + 1].rsplit(":", 1)[1]
    assert job["static_configs"] == [{"targets": [f"web:{port}"]}]
    assert job["metrics_path"] == "/metrics"
    # Grafana: the provisioned data source is this Prometheus; the dashboard file is where
    # the provider reads.
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "pw"
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "durable-jobs.yml").read_text())[
        "providers"
    ]
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "durable-jobs.json").read_text())
    assert mounts[f"{provider['options']['path']}/durable-jobs.json"] == (
        "./deploy/grafana/durable-jobs.json"
    )
    variable = dashboard["templating"]["list"][0]
    assert variable["type"] == "datasource" and variable["query"] == source["type"]
    # Without the variables the stack still parses; the containers refuse to start instead.
    quiet = compose()
    assert quiet["services"]["prometheus"]["environment"]["JOBS_METRICS_TOKEN"] == ""
    assert 'test -n "$JOBS_METRICS_TOKEN"' in " ".join(
        quiet["services"]["prometheus"]["entrypoint"]
    )
    assert 'test -n "$GF_SECURITY_ADMIN_PASSWORD"' in " ".join(
        quiet["services"]["grafana"]["entrypoint"]
    )


# -- Dockerfile -----------------------------------------------------------------------------


def test_image_runs_the_production_server_with_collected_static_files__dockerfile() -> None:
    text = dockerfile_text()
    assert dockerfile_env()["DJANGO_ENV"] == "production"
    assert dockerfile_cmd() == [
        "gunicorn",
        "-c",
        "python:jobsite.gunicorn",
        "--bind",
        "0.0.0.0:8000",
        "jobsite.asgi:application",
    ]
    assert 'pip install --no-cache-dir ".[demo]"' in text
    assert "manage.py collectstatic --noinput" in text
    sources = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    for source in sources:
        for path in source.split():
            assert (ROOT / path).exists(), f"COPY {path}: no such file"
    copied = {Path(s).name for s in sources}
    assert {"jobsite", "jobs", "outbox", "documents", "demo", "manage.py"} <= copied


# -- Procfile ------------------------------------------------------------------------------


def test_make_run_uses_the_production_server_and_ports_from_the_environment__procfile() -> None:
    roles = procfile()
    web = shlex.split(roles["web"])
    image = dockerfile_cmd()
    assert web[: web.index("--bind")] == image[: image.index("--bind")]
    assert web[-1] == image[-1] == "jobsite.asgi:application"
    assert "127.0.0.1:${WEB_PORT:-8000}" in roles["web"]
    assert "--port=${FLOWER_PORT:-5555}" in roles["flower"]
    assert "--port ${PROVIDER_PORT:-8765}" in roles["provider"]
    assert "--conf=jobsite/flowerconfig.py" in roles["flower"]
    assert "--basic-auth" not in roles["flower"]  # jobsite/flowerconfig.py decides
    for role, command in roles.items():
        bare = re.sub(r"\$\{\w+:-[^}]*\}", "", command)
        assert not re.search(r"\b(8000|5555|8765)\b", bare), (role, command)


def test_run_env_names_the_ports_the_procfile_uses__make_run_defaults() -> None:
    from jobsite.runenv import DEFAULT_PORTS, run_env_values

    used = dict(re.findall(r"\$\{(\w+_PORT):-(\d+)\}", " ".join(procfile().values())))
    assert used == DEFAULT_PORTS
    values = run_env_values({"DATABASE_URL": "postgres://db", "CELERY_BROKER_URL": "redis://b"})
    assert values["WEB_URL"] == f"http://127.0.0.1:{DEFAULT_PORTS['WEB_PORT']}"
    moved = run_env_values({"DATABASE_URL": "d", "CELERY_BROKER_URL": "b", "WEB_PORT": "8001"})
    assert moved["WEB_URL"] == "http://127.0.0.1:8001" and moved["FLOWER_PORT"] == "5555"


def test_rabbitmq_started_only_when_asked__ensure_services() -> None:
    script = (ROOT / "scripts" / "ensure-services.sh").read_text()
    assert 'need_rabbitmq="${JOBS_NEED_RABBITMQ:-0}"' in script
    assert "amqp://*" in script
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'JOBS_NEED_RABBITMQ="${JOBS_NEED_RABBITMQ:-1}"' in ci

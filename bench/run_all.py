"""`make bench`: every benchmark of durable-jobs, printed and written to docs/benchmarks.md.

Usage: python bench/run_all.py --render [var/bench/last.json]   # rewrite the doc only
       python bench/run_all.py [--quick] [--only submit,submitmany,relay,latency,e2e,cpu,
                                  calls,statements,backlog,scale,serial,slowlink,priority,storage]
                               [--jobs N] [--backlog N] [--rounds R] [--concurrency 1,2,4]
                               [--no-procrastinate] [--strict] [--write-docs | --no-docs]
A full run (no --only, no --quick) rewrites docs/benchmarks.md and var/bench/last.json;
others print only (results in var/bench/last-partial.json) unless --write-docs; with
`--only slowlink --write-docs` (`make bench-slow-link`), `--only priority`, `--only scale`,
`--only statements` or `--only storage` with `--write-docs` only that section and its target
rows of the doc are replaced. It uses
its own databases (prefix BENCH_DB_PREFIX, default dj_bench_) and a private redis-server
started for the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCENARIOS = [
    "submit",
    "submitmany",
    "relay",
    "latency",
    "e2e",
    "cpu",
    "calls",
    "statements",
    "backlog",
    "scale",
    "serial",
    "slowlink",
    "priority",
    "storage",
]
SPLICED = {
    "scale",
    "statements",
    "slowlink",
    "priority",
    "storage",
}  # scenarios whose section --write-docs can replace alone


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a couple of rounds")
    parser.add_argument("--only", default="", help=f"comma list of {','.join(SCENARIOS)}")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per round")
    parser.add_argument(
        "--backlog",
        type=int,
        default=None,
        help="jobs of the backlog drain and of submit_many (10,000; --quick 1,000)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--concurrency", default=None, help="worker processes, e.g. 1,2,4")
    parser.add_argument(
        "--submitters",
        type=int,
        default=4,
        help="driver threads submitting in the e2e and scale rounds",
    )
    parser.add_argument("--no-procrastinate", action="store_true")
    parser.add_argument(
        "--no-proposals", action="store_true", help="skip the proposed-change variants"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument("--write-docs", action="store_true", help="always rewrite the doc")
    docs.add_argument("--no-docs", action="store_true", help="never rewrite the doc")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {SCENARIOS}")
    args.selected = only or SCENARIOS
    args.jobs = args.jobs or (60 if args.quick else 200)
    args.backlog = args.backlog or (1_000 if args.quick else 10_000)
    args.rounds = args.rounds or (2 if args.quick else 3)
    conc = args.concurrency or ("1,2" if args.quick else "1,2,4")
    try:
        args.concurrencies = [int(x) for x in conc.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--concurrency must be integers like 1,2,4, not {conc!r}")
    if args.jobs < 10 or args.backlog < 100 or args.rounds < 1 or not args.concurrencies:
        parser.error(
            "--jobs must be >= 10, --backlog >= 100, --rounds >= 1, --concurrency non-empty"
        )
    return args


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwind: every worker and the private Redis get stopped


def _kept_sections(old: str, new: str) -> str:
    """`new` (the whole doc rewritten) with the sections other commands record kept from
    `old`: the soak's (`make bench-soak`, bench/soak.py), and the hand-written notes."""
    from bench import soak_report
    from bench.splice import carry, carry_notes

    return carry_notes(old, carry(old, new, soak_report.SECTION))


def render(path: Path) -> int:
    """Rewrite docs/benchmarks.md from a saved results file (var/bench/last.json)."""
    from bench import report

    data = json.loads(path.read_text())
    doc = ROOT / "docs" / "benchmarks.md"
    new = report.markdown(data["meta"], data["results"], report.targets(data["results"]))
    doc.write_text(_kept_sections(doc.read_text() if doc.exists() else "", new))
    print(f"wrote {doc.relative_to(ROOT)} from {path}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--render"]:
        return render(Path(argv[1]) if len(argv) > 1 else ROOT / "var" / "bench" / "last.json")
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    from bench.infra import Fleet, RedisCounters, db_name, db_url, ensure_database, private_redis

    main_db = db_name("main")
    ensure_database(main_db)
    started = time.monotonic()
    with private_redis() as server:
        os.environ["DATABASE_URL"] = db_url(main_db)
        os.environ["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{server.port}/0"
        os.environ["BENCH_BROKER_URL"] = os.environ["CELERY_BROKER_URL"]
        os.environ["CELERY_WORKER_SEND_TASK_EVENTS"] = "0"
        os.environ["LOG_LEVEL"] = "WARNING"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
        import django

        django.setup()
        from bench import report, scenarios
        from bench.infra import machine_info

        fleet = Fleet()
        bench = scenarios.Bench(
            redis=server,
            counters=RedisCounters(server.port),
            fleet=fleet,
            jobs=args.jobs,
            rounds=args.rounds,
            submitters=args.submitters,
            concurrencies=args.concurrencies,
            quick=args.quick,
            backlog=args.backlog,
        )
        machine = machine_info()
        results: dict[str, Any] = {}
        try:
            for name in args.selected:
                scenarios.log(f"== {name}")
                t0 = time.monotonic()
                if name == "e2e":
                    results[name] = scenarios.scenario_e2e(
                        bench,
                        with_procrastinate=not args.no_procrastinate,
                        with_reuse=not args.no_proposals,
                    )
                elif name == "cpu":
                    from bench.cpu_split import scenario_cpu

                    results[name] = scenario_cpu(bench)
                elif name == "statements":
                    from bench.statements import scenario_statements

                    results[name] = scenario_statements(bench)
                elif name == "calls":
                    from bench.db_calls import scenario_calls

                    results[name] = scenario_calls(bench)
                elif name in ("backlog", "submitmany"):
                    from bench import backlog

                    results[name] = getattr(backlog, f"scenario_{name}")(bench)
                elif name == "slowlink":
                    from bench.slowlink import scenario_slowlink

                    results[name] = scenario_slowlink(bench)
                elif name == "priority":
                    from bench.priority import scenario_priority

                    results[name] = scenario_priority(bench)
                elif name == "storage":
                    from bench.storage import scenario_storage

                    results[name] = scenario_storage(bench)
                elif name == "latency":
                    results[name] = scenarios.scenario_latency(
                        bench, with_reuse=not args.no_proposals
                    )
                else:
                    results[name] = getattr(scenarios, f"scenario_{name}")(bench)
                results[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
        finally:
            fleet.close()
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/run_all.py " + shlex.join(argv),
        "args": {
            "jobs": args.jobs,
            "backlog": args.backlog,
            "rounds": args.rounds,
            "concurrencies": args.concurrencies,
            "quick": args.quick,
            "submitters": args.submitters,
        },
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": machine,
    }
    targets = report.targets(results)
    print(report.summary(results, targets))
    out_dir = ROOT / "var" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    full = set(args.selected) == set(SCENARIOS) and not args.quick
    writes_doc = args.write_docs or (full and not args.no_docs)
    splices = writes_doc and not full and set(args.selected) <= SPLICED
    # last.json is what --render rewrites the doc from: only a run that wrote the whole doc
    # replaces it; any other run keeps its results in last-partial.json.
    (out_dir / ("last.json" if writes_doc and not splices else "last-partial.json")).write_text(
        json.dumps({"meta": meta, "results": results, "targets": targets}, indent=2)
    )
    if splices:
        import importlib

        path = ROOT / "docs" / "benchmarks.md"
        for name in args.selected:
            module = importlib.import_module(f"bench.{name}_report")
            section = module.table(results[name], meta)
            checks = module.targets(results[name])
            path.write_text(module.splice(path.read_text(), section, checks))
            print(f"replaced the {name} section of {path.relative_to(ROOT)}")
    elif writes_doc:
        path = ROOT / "docs" / "benchmarks.md"
        new = report.markdown(meta, results, targets)
        path.write_text(_kept_sections(path.read_text() if path.exists() else "", new))
        print(f"wrote {path.relative_to(ROOT)}")
    failed = [t for t in targets if not t["ok"]]
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

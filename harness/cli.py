"""Command line: ``python -m harness {list,bench,report}``."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from adapters import discover
from harness import env, records, report, runner, timing
from harness.plan import DEVICES, PlanError, plan
from workloads import WORKLOADS

DEFAULT_OUT = Path("reports")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def cmd_list(args: argparse.Namespace) -> int:
    rows = [
        [a.name, a.framework, a.graph, "available" if a.available else f"unavailable: {a.unavailable}"]
        for a in discover().values()
    ]
    print(tabulate(rows, ["adapter", "framework", "graph", "status"], tablefmt="simple"))
    print()
    wrows = [[name, spec.family, f"{spec.param_count():,}", spec.batch_size] for name, spec in WORKLOADS.items()]
    print(tabulate(wrows, ["workload", "family", "parameters", "batch"], tablefmt="simple"))
    return 0


def _line(i: int, n: int, rec: dict[str, Any]) -> None:
    what = f"[{i}/{n}] {rec['adapter']:<12} {rec['workload']:<9} {rec['device_requested']:<5}"
    if rec["status"] == "ok":
        print(f"{what} ok  {rec['median_s'] * 1e3:9.3f} ms/step (first step {rec['first_step_s'] * 1e3:.1f} ms)")
    else:
        print(f"{what} {rec['status']}: {rec['reason']}")
    sys.stdout.flush()


def cmd_bench(args: argparse.Namespace) -> int:
    adapters = discover()
    threads = args.threads or env.default_threads()
    run_id = args.run_id or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        if args.threads is not None and args.threads < 1:
            raise PlanError(f"--threads must be >= 1, got {args.threads}")
        cells = plan(adapters, args.framework, args.workload, args.device, args.set, args.profile, threads, run_id)
    except PlanError as exc:
        return _fail(str(exc))
    run_dir = args.out / run_id
    if (run_dir / records.RESULTS).exists():
        return _fail(f"{run_dir} already holds results; choose another --run-id")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / records.ENV).write_text(
        json.dumps(env.capture(threads, ["python -m harness", *sys.argv[1:]]), indent=2) + "\n"
    )
    print(f"run {run_id}: {len(cells)} cells, profile {args.profile}, {threads} threads per framework")
    timeout = args.timeout or timing.PROFILES[args.profile].timeout_s
    runner.run_cells(cells, adapters, run_dir / records.RESULTS, timeout, on_record=_line)
    path = report.write(run_dir)
    print(f"report: {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    try:
        path = report.write(args.run_dir)
    except records.RecordError as exc:
        return _fail(str(exc))
    print(f"report: {path}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness",
        description="dlcompare: compare deep-learning frameworks on one workload spec, honestly timed.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="adapters (available or why not) and workloads").set_defaults(func=cmd_list)

    b = sub.add_parser("bench", help="run a matrix of cells and write reports/<run-id>/")
    b.add_argument("--framework", default="all", help="all, an adapter, a framework family, or a comma list")
    b.add_argument("--workload", default="all", help=f"all, or a comma list of: {', '.join(WORKLOADS)}")
    b.add_argument("--device", default="auto", help=f"one or a comma list of: {', '.join(DEVICES)}")
    b.add_argument("--profile", default="quick", choices=sorted(timing.PROFILES))
    b.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a spec field")
    b.add_argument("--threads", type=int, default=None, help="intra-op threads for every framework (default: all)")
    b.add_argument("--timeout", type=float, default=None, help="seconds per cell (default: the profile's)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help="parent folder of run folders")
    b.add_argument("--run-id", default=None, help="run folder name (default: a timestamp)")
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("report", help="rebuild report.md of a run folder from its records")
    r.add_argument("run_dir", type=Path)
    r.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)

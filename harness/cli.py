"""Command line: ``python -m harness {list,bench,report}``."""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from adapters import discover
from adapters.base import PRECISIONS
from harness import env, records, report, runner, timing
from harness.plan import DATA_MODES, DEVICES, PlanError, plan
from harness.progress import MatrixProgress
from workloads import STRATEGIES, WORKLOADS

DEFAULT_OUT = Path("reports")
PLAN = "plan.json"


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


def _new_run(args: argparse.Namespace, adapters) -> tuple[Path, list[dict[str, Any]], float]:
    """Plan a new run; raises PlanError. Nothing is written here."""
    if args.threads is not None and args.threads < 1:
        raise PlanError(f"--threads must be >= 1, got {args.threads}")
    if args.timeout is not None and args.timeout <= 0:
        raise PlanError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    threads = args.threads or env.default_threads()
    run_id = args.run_id or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    cells = plan(
        adapters,
        args.framework,
        args.workload,
        args.device,
        args.set,
        args.profile,
        threads,
        run_id,
        strategy=args.strategy,
        data=args.data,
        precision=args.precision,
    )
    run_dir = args.out / run_id
    if (run_dir / records.RESULTS).exists():
        raise PlanError(
            f"{run_dir} already holds results; resume it with --resume {run_dir} or choose another --run-id"
        )
    return run_dir, cells, args.timeout or timing.PROFILES[args.profile].timeout_s


def _resumed_run(run_dir: Path, adapters) -> tuple[list[dict[str, Any]], float]:
    """The planned cells of an earlier run that have no record yet; raises PlanError."""
    plan_path = run_dir / PLAN
    if not plan_path.is_file():
        raise PlanError(f"{run_dir} is not a run folder (no {PLAN}); valid: a folder written by bench")
    saved = json.loads(plan_path.read_text())
    results = run_dir / records.RESULTS
    done = {r.get("cell_id") for r in records.load(results)} if results.exists() else set()
    todo = [c for c in saved["cells"] if c["cell_id"] not in done]
    unknown = sorted({c["adapter"] for c in todo} - set(adapters))
    if unknown:
        raise PlanError(f"adapters of that run are not installed here: {', '.join(unknown)}")
    return todo, saved["timeout_s"]


def _dry_run(cells: list[dict[str, Any]], adapters) -> None:
    rows = [
        [
            c["adapter"],
            c["workload"],
            c["device_requested"],
            " ".join(c["overrides"]) or "-",
            adapters[c["adapter"]].unavailable or "",
        ]
        for c in cells
    ]
    print(tabulate(rows, ["adapter", "workload", "device", "overrides", "will skip: reason"], tablefmt="simple"))
    print(f"{len(cells)} cells planned; nothing was run.")


def _peak_devices(cells: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    wanted = {c["device_requested"] for c in cells}
    devices = ["cpu"] if wanted & {"cpu", "auto"} else []
    if info["gpus"] and wanted & {"cuda", "auto"}:
        devices.append("cuda")
    return devices


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_bench(args: argparse.Namespace) -> int:
    adapters = discover()
    try:
        if args.resume:
            run_dir = args.resume
            cells, timeout = _resumed_run(run_dir, adapters)
        else:
            run_dir, cells, timeout = _new_run(args, adapters)
    except (PlanError, records.RecordError) as exc:
        return _fail(str(exc))
    if args.dry_run:
        _dry_run(cells, adapters)
        return 0
    if not args.resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        threads = cells[0]["threads"] if cells else env.default_threads()
        command = ["python -m harness", *sys.argv[1:]]
        info = env.capture(threads, command)
        print("measuring device peaks (matmul, copy) ...", flush=True)
        info["peaks"] = runner.measure_peaks(_peak_devices(cells, info), threads)
        info["precision"] = cells[0]["precision"] if cells else "fp32"
        (run_dir / records.ENV).write_text(json.dumps(info, indent=2) + "\n")
        (run_dir / PLAN).write_text(json.dumps({"timeout_s": timeout, "cells": cells}, indent=1) + "\n")
    print(f"run {run_dir.name}: {len(cells)} cells to run, writing {run_dir}", flush=True)

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        with MatrixProgress(len(cells)) as progress:
            runner.run_cells(cells, adapters, run_dir / records.RESULTS, timeout, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    problems: list[str] = []
    if (run_dir / records.RESULTS).exists():
        print(f"report: {report.write(run_dir)}")
        problems = report.physics_violations(records.load(run_dir / records.RESULTS), report.load_env(run_dir))
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
    if interrupted:
        print(f"interrupted; finished cells are kept. Resume with: python -m harness bench --resume {run_dir}")
        return 130
    failed = [r for r in records.load(run_dir / records.RESULTS) if r["status"] == "failed"]
    if args.strict and (failed or problems):
        print(f"{len(failed)} failed cells, {len(problems)} physics violations (--strict)", file=sys.stderr)
        return 1
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
    b.add_argument(
        "--strategy",
        default="all",
        help=f"loop strategies for rnn-caption: all, or a comma list of: {', '.join(STRATEGIES)}",
    )
    b.add_argument("--data", default="all", help=f"data modes: all, or a comma list of: {', '.join(DATA_MODES)}")
    b.add_argument("--precision", default="fp32", choices=PRECISIONS, help="fp32 (TF32 off everywhere) or tf32")
    b.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a spec field")
    b.add_argument("--threads", type=int, default=None, help="intra-op threads for every framework (default: all)")
    b.add_argument("--timeout", type=float, default=None, help="seconds per cell (default: the profile's)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help="parent folder of run folders")
    b.add_argument("--run-id", default=None, help="run folder name (default: a timestamp)")
    b.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="run only the missing cells of a run")
    b.add_argument("--strict", action="store_true", help="exit 1 if any cell failed or broke the physics check")
    b.add_argument("--dry-run", action="store_true", help="print the planned cells and exit")
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("report", help="rebuild report.md of a run folder from its records")
    r.add_argument("run_dir", type=Path)
    r.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)

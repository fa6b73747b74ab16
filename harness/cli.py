"""Command line: ``python -m harness {list,bench,report}``."""

from __future__ import annotations

import argparse
import datetime
import errno
import fcntl
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import IO, Any, NamedTuple

from tabulate import tabulate

from adapters import discover
from adapters.base import PRECISIONS
from harness import env, records
from harness.checks import conformance, doctor, fidelity
from harness.install import variant
from harness.measuring import floors, peak, timing
from harness.reporting import compare, report
from harness.reporting.hardware import physics_violations
from harness.running import devices, executors, rounds, runner, turns
from harness.running.plan import DATA_MODES, DEVICES, PlanError, plan, select_adapters, select_workloads, twins
from harness.running.progress import MatrixProgress
from harness.stats.cells import combine_all
from workloads import STRATEGIES, WORKLOADS

DEFAULT_OUT = Path("reports")
PLAN = "plan.json"
LOCK = ".lock"
DEFAULT_SWEEP = "batch_size=16,32,64,128,256,512,1024"
RUN_ID = re.compile(r"[A-Za-z0-9_.-]+")
# Write failures of the storage (not of the harness): one line and exit 2, never a traceback.
STORAGE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG}


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def cmd_list(args: argparse.Namespace) -> int:
    rows = [
        [a.name, a.framework, a.graph, a.source, "available" if a.available else f"unavailable: {a.unavailable}"]
        for a in discover().values()
    ]
    print(tabulate(rows, ["adapter", "framework", "graph", "from", "status"], tablefmt="simple"))
    print()
    wrows = [[name, spec.family, f"{spec.param_count():,}", spec.batch_size] for name, spec in WORKLOADS.items()]
    print(tabulate(wrows, ["workload", "family", "parameters", "batch"], tablefmt="simple"))
    return 0


class Run(NamedTuple):
    """A planned run (as plan.json keeps it): its cells, rounds per cell, seconds per worker, and
    its time budget (seconds, or None: fixed rounds)."""

    cells: list[dict[str, Any]]
    rounds: int
    timeout_s: float
    budget_s: float | None = None

    def todo(self, results: Path) -> list[tuple[dict[str, Any], int]]:
        """(cell, round) pairs without a record in ``results`` yet, in running order."""
        done = records.load(results) if results.exists() else []
        return rounds.schedule(self.cells, self.rounds, self.cells[0]["run_id"] if self.cells else "", done)


def _new_run(args: argparse.Namespace, adapters) -> tuple[Path, Run]:
    """Plan a new run; raises PlanError. Nothing is written here."""
    if args.threads is not None and args.threads < 1:
        raise PlanError(f"--threads must be >= 1, got {args.threads}")
    cores = os.cpu_count() or 1
    if args.threads is not None and args.threads > cores:  # one rule for every executor
        raise PlanError(f"--threads {args.threads} is more than the {cores} logical cores of this machine")
    if args.run_id is not None and (not RUN_ID.fullmatch(args.run_id) or args.run_id in (".", "..")):
        raise PlanError(
            f"--run-id {args.run_id!r} is not a name: letters, digits and - _ . only "
            "(no path separator), and not . or .."
        )
    if args.rounds is not None and args.rounds < 1:
        raise PlanError(f"--rounds must be >= 1, got {args.rounds}")
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
        force_precision=args.force_precision,
        sweep=args.sweep,
        gpu_present=variant.detect().driver is not None,
        envs=args.env,
    )
    if args.command == "fidelity" and args.precision == "bf16":
        raise PlanError("--precision bf16: the idiomatic scripts (fidelity/) train in float32; valid: fp32, tf32")
    if args.command == "fidelity":  # each adapter beside its framework's idiomatic script
        cells = fidelity.with_scripts(cells, fidelity.scripts())
        if not cells:
            raise PlanError(f"no idiomatic script in fidelity/ for {args.framework}; scripts: {_script_names()}")
    run_dir = args.out / run_id
    if (run_dir / records.RESULTS).exists():
        raise PlanError(
            f"{run_dir} already holds results; resume it with --resume {run_dir} or choose another --run-id"
        )
    profile = timing.PROFILES[args.profile]
    if args.twins:
        cells = twins(cells, args.twins)
    return run_dir, Run(cells, args.rounds or profile.rounds, args.timeout or profile.timeout_s, args.budget)


def _script_names() -> str:
    return ", ".join(sorted(fidelity.scripts())) or "none"


def _resumed_run(run_dir: Path, adapters) -> Run:
    """The plan of an earlier run (its rounds without a record run on resume); raises PlanError."""
    plan_path = run_dir / PLAN
    if not plan_path.is_file():
        raise PlanError(f"{run_dir} is not a run folder (no {PLAN}); valid: a folder written by bench")
    try:
        saved = json.loads(plan_path.read_text())
        run = Run(saved["cells"], saved.get("rounds", 1), saved["timeout_s"], saved.get("budget_s"))
    except (ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"{plan_path} is damaged ({type(exc).__name__}: {exc}); start the run again") from None
    unknown = sorted({records.base_adapter(c) for c, _ in run.todo(run_dir / records.RESULTS)} - set(adapters))
    if unknown:
        raise PlanError(f"adapters of that run are not installed here: {', '.join(unknown)}")
    return run


def _dry_run(run: Run, adapters) -> None:
    """The planned cells, each with the reason it will be skipped where that is known without
    starting a framework (not installed, declined by ``supports``, no input pipeline, no GPU)."""
    cells = run.cells
    rows, skipped = [], 0
    for c in cells:
        strategy = next((o.split("=", 1)[1] for o in c["overrides"] if o.startswith("strategy=")), "-")
        others = [o for o in c["overrides"] if not o.startswith("strategy=")]
        others += [f"{k}={v}" for k, v in sorted(c.get("pipeline", {}).items())]
        device = c["device_requested"]
        reason = runner.skip_reason(adapters[records.base_adapter(c)], c) or devices.no_gpu_reason(device)
        skipped += bool(reason)
        label = c["adapter"] + (" (script)" if c.get("script") else "")
        rows.append([label, c["workload"], strategy, c.get("data", "-"), device, " ".join(others) or "-", reason or ""])
    headers = ["adapter", "workload", "strategy", "data", "device", "overrides", "will skip: reason"]
    print(tabulate(rows, headers, tablefmt="simple"))
    print(f"{len(cells)} cells planned ({skipped} will be skipped), {run.rounds} rounds each; nothing was run.")


def _peak_devices(cells: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    wanted = {c["device_requested"] for c in cells}
    return [d for d in ("cpu", "cuda") if d in wanted and (d == "cpu" or info["gpus"])]


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_bench(args: argparse.Namespace) -> int:
    adapters = discover()
    try:
        if args.resume:
            run_dir = args.resume
            run = _resumed_run(run_dir, adapters)
        else:
            run_dir, run = _new_run(args, adapters)
    except (PlanError, records.RecordError) as exc:
        return _fail(str(exc))
    if args.dry_run:
        _dry_run(run, adapters)
        return 0
    unwritable = _unwritable(run_dir)
    if unwritable:
        return _fail(f"{'--resume' if args.resume else '--out'}: cannot write to {run_dir}: {unwritable}")
    lock = _lock(run_dir)
    if lock is None:
        return _fail(
            f"{run_dir} is in use by another bench (it holds {run_dir / LOCK}); wait for it or choose another --run-id"
        )
    with lock:
        try:  # under the lock, again: another bench may have written the folder since the plan
            if args.resume:
                run = _resumed_run(run_dir, adapters)
            elif (run_dir / records.RESULTS).exists():
                raise PlanError(f"{run_dir} already holds results; resume it with --resume {run_dir}")
        except (PlanError, records.RecordError) as exc:
            return _fail(str(exc))
        try:
            return _run(args, adapters, run_dir, run)
        except OSError as exc:  # a full disk, a quota, an I/O error: one line, exit 2
            if not isinstance(exc, records.RecordWriteError) and exc.errno not in STORAGE_ERRORS:
                raise
            return _write_failed(exc, run_dir)


def _unwritable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot hold a run (created here if need be, a test write made), or None."""
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"dlcompare write test\n" * 200)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) not in (run_dir, probe) else ""
        return f"{exc.strerror or exc}{where}"
    return None


def _write_failed(exc: OSError, run_dir: Path) -> int:
    """The one line for a write that failed mid-run; every record written before it is whole."""
    what = (
        str(exc)
        if isinstance(exc, records.RecordWriteError)
        else f"cannot write {exc.filename or run_dir}: {exc.strerror}"
    )
    if (run_dir / PLAN).is_file():
        then = f"finished cells are kept; free space, then: python -m harness bench --resume {run_dir}"
    else:
        then = "nothing was measured yet; free space and start the run again"
    return _fail(f"{what}; {then}")


def _lock(run_dir: Path) -> IO[str] | None:
    """An exclusive lock on the run folder, held while this process lives; None if another
    process holds it. Two benches writing one folder would time each other and mix records."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = (run_dir / LOCK).open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _backend(args: argparse.Namespace, run_dir: Path):
    """The cluster executor's backend, None for the local one; raises ExecutorError."""
    if args.executor == "local":
        return None
    for flag, value in (("--slurm-time", args.slurm_time), ("--slurm-max-concurrent", args.slurm_max_concurrent)):
        if value is not None and value < 1:
            raise executors.ExecutorError(f"{flag} must be >= 1, got {value}")
    slurm = executors.SlurmOptions(
        partition=args.slurm_partition,
        gpus_per_task=args.slurm_gpus_per_task,
        time_min=args.slurm_time,
        max_concurrent=args.slurm_max_concurrent or executors.SlurmOptions.max_concurrent,
        share_nodes=args.share_nodes,
    )
    return executors.make(args.executor, run_dir, slurm, args.ray_address, args.ray_cpus_per_cell)


def _run(args: argparse.Namespace, adapters, run_dir: Path, run: Run) -> int:
    try:  # before anything is measured: a missing extra or an unreachable cluster fails at once
        backend = _backend(args, run_dir)
    except executors.ExecutorError as exc:
        return _fail(str(exc))
    try:
        return _run_with(args, adapters, run_dir, run, backend)
    finally:
        if backend is not None:
            backend.close()


def _run_with(args: argparse.Namespace, adapters, run_dir: Path, run: Run, backend) -> int:
    cells = run.cells
    if not args.resume:
        threads = cells[0]["threads"] if cells else env.default_threads()
        command = ["python -m harness", *sys.argv[1:]]
        info = env.capture(threads, command, [m for a in adapters.values() for m in a.cls.requires])
        info["precision"] = cells[0]["precision"] if cells else "fp32"
        print("asking each framework for its build (doctor) ...", flush=True)
        envs = {c["env"]: c["python"] for c in cells if c.get("env")}
        info["doctor"] = doctor.diagnose(adapters, threads, sorted({records.base_adapter(c) for c in cells}), envs)
        print("measuring device peaks (matmul, copy) ...", flush=True)
        info["peaks"] = runner.measure_peaks(_peak_devices(cells, info), threads, info["precision"])
        print("measuring kernel floors (each step's matmuls and convolutions alone) ...", flush=True)
        found = floors.kernel_floors(cells, _peak_devices(cells, info), threads, info["precision"])
        for c in cells:  # in plan.json too, so a resumed run's cells keep them
            c["kernel_floor_s"] = found["floors"][c["cell_id"]]
        info["kernel_floors"] = {k: found[k] for k in ("kernels", "fastest_library", "errors")}
        records.write_json(run_dir / records.ENV, info)
        plan_json = {"timeout_s": run.timeout_s, "rounds": run.rounds, "budget_s": run.budget_s, "cells": cells}
        records.write_json(run_dir / PLAN, plan_json, indent=1)
    results = run_dir / records.RESULTS
    todo = run.todo(results)
    where = f" on {backend.name}" if backend is not None else ""
    print(
        f"run {run_dir.name}: {len(cells)} cells x {run.rounds} rounds, {len(todo)} to run{where}, writing {run_dir}",
        flush=True,
    )

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    interrupted = False
    try:
        with MatrixProgress(len(todo)) as progress:
            if backend is None:
                # A resumed run's budget counts afresh: what it had spent is not known.
                budget = turns.Budget(run.budget_s)
                progress.budget = budget if run.budget_s is not None else None
                level = turns.verdict_level(run.rounds, run.budget_s)
                turns.run(todo, run.rounds, adapters, results, run.timeout_s, progress, budget, level)
            else:
                executors.run_rounds(backend, todo, run.rounds, results, run.timeout_s, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    problems: list[str] = []
    if not interrupted and todo:
        print("measuring device peaks again (the run keeps the better of start and end) ...", flush=True)
        info = records.load_env(run_dir)
        end = runner.measure_peaks(list(info.get("peaks", {})), info.get("threads", 1), info.get("precision", "fp32"))
        info["peaks"] = peak.best_of(info.get("peaks", {}), end)
        records.write_json(run_dir / records.ENV, info)
    if (run_dir / records.RESULTS).exists():
        print(f"report: {report.write(run_dir)}")
        if (run_dir / "fidelity.md").exists():
            print(f"fidelity: {run_dir / 'fidelity.md'}")
        measured = records.load(run_dir / records.RESULTS)
        cells_done = combine_all([r for r in measured if not records.is_idiomatic(r)])
        problems = physics_violations(cells_done, report.load_env(run_dir))
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


def cmd_doctor(args: argparse.Namespace) -> int:
    print("asking each framework in its own process ...", flush=True)
    found = doctor.diagnose(discover(), env.default_threads())
    print(doctor.render(found))
    return 0 if doctor.healthy(found) else 1


def cmd_report(args: argparse.Namespace) -> int:
    first, *others = args.run_dirs
    if others and args.out is None:
        return _fail("merging several runs needs --out DIR for the merged report")
    try:
        path = report.write(first, others, args.out)
    except records.RecordError as exc:
        return _fail(str(exc))
    print(f"report: {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    adapters = discover()
    try:
        names = select_adapters(args.adapter, adapters)
        variants = conformance.all_variants(select_workloads(args.workload))
    except PlanError as exc:
        return _fail(str(exc))
    failed = 0
    for name in names:
        info = adapters[name]
        if not info.available:
            print(f"SKIP  {name}: unavailable: {info.unavailable}")
            continue
        print(f"checking {name} against the NumPy float64 reference (one worker process) ...", flush=True)
        try:
            results = conformance.run_adapter(info, variants, device=args.device)
            lines, bad = conformance.report_lines(info, results)
        except RuntimeError as exc:
            lines, bad = [f"FAIL  {exc}"], 1
        print("\n".join(lines))
        print(f"{name}: {f'{bad} checks failed' if bad else 'all checks passed'}", flush=True)
        failed += bad
    return 1 if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        text = compare.build(args.run_a, args.run_b)
    except records.RecordError as exc:
        return _fail(str(exc))
    out = args.out or args.run_b / f"compare-{args.run_a.name}.md"
    out.write_text(text)
    print(f"comparison: {out}")
    return 0


def _duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``15m``, ``1h`` or ``1h30m``; argparse's error otherwise."""
    match = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; valid: 900, 900s, 15m, 1h, 1h30m")
    h, m, sec = (float(g or 0) for g in match.groups())
    seconds = 3600 * h + 60 * m + sec
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a budget must be more than 0 seconds")
    return seconds


def _factors(text: str) -> list[float]:
    try:
        factors = [float(f) for f in text.split(",") if f.strip()]
    except ValueError:
        factors = []
    if not factors or any(not 0 <= f <= 10 for f in factors):
        raise argparse.ArgumentTypeError(
            f"{text!r}: valid: a comma list of slow-downs between 0 and 10, e.g. 0,0.1,0.25"
        )
    return factors


def _bench_arguments(b: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    b.add_argument("--framework", default="all", help="all, an adapter, a framework family, or a comma list")
    b.add_argument("--workload", default=defaults["workload"], help=f"all, or a comma list of: {', '.join(WORKLOADS)}")
    b.add_argument("--device", default="auto", help=f"one or a comma list of: {', '.join(DEVICES)}")
    b.add_argument("--profile", default="quick", choices=sorted(timing.PROFILES))
    b.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="fresh processes per cell, interleaved across cells (default: the profile's: "
        + ", ".join(f"{p.name} {p.rounds}" for p in timing.PROFILES.values())
        + ")",
    )
    b.add_argument(
        "--strategy",
        default=defaults["strategy"],
        help=f"loop strategies for rnn-caption and transformer: all, or a comma list of: {', '.join(STRATEGIES)}",
    )
    b.add_argument(
        "--data", default=defaults["data"], help=f"data modes: all, or a comma list of: {', '.join(DATA_MODES)}"
    )
    b.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="fp32 (TF32 off everywhere), tf32, or bf16 (mixed: float32 master weights, bfloat16 compute)",
    )
    b.add_argument(
        "--force-precision",
        action="store_true",
        help="time a precision the device only emulates (bf16 on a CPU without bfloat16 instructions) "
        "instead of skipping those cells",
    )
    b.add_argument(
        "--sweep", default=defaults["sweep"], metavar="FIELD=V1,V2,...", help="run every cell for each value"
    )
    b.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a spec field, or an input pipeline setting (--data loader): workers, prefetch",
    )
    b.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=PYTHON",
        help="run every adapter in this Python environment too, as <adapter>@NAME (repeatable): versions side by side",
    )
    b.add_argument(
        "--budget",
        type=_duration,
        default=None,
        metavar="TIME",
        help="time for the whole run, e.g. 15m: rounds after the first stop when it is spent, and what is left "
        "goes to more processes of the cells whose verdicts are unsettled (default: the profile's fixed rounds)",
    )
    b.add_argument(
        "--twins",
        type=_factors,
        default=None,
        metavar="F,F,...",
        help="calibration: every cell also runs as identical twins (F=0) or twins slowed by F of a step "
        "(0.1: 10%%), named <adapter>~twin<i> or ~slow<percent> (see make calibrate)",
    )
    b.add_argument("--threads", type=int, default=None, help="intra-op threads for every framework (default: all)")
    b.add_argument("--timeout", type=float, default=None, help="seconds per cell (default: the profile's)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help="parent folder of run folders")
    b.add_argument("--run-id", default=None, help="run folder name (default: a timestamp)")
    b.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="run only the missing cells of a run")
    b.add_argument("--strict", action="store_true", help="exit 1 if any cell failed or broke the physics check")
    b.add_argument(
        "--executor",
        default="local",
        choices=executors.EXECUTORS,
        help="where cells run: this machine, a Slurm cluster (submitit; its local mode without Slurm) or Ray",
    )
    b.add_argument("--slurm-partition", default=None, help="Slurm partition of the jobs")
    b.add_argument("--slurm-gpus-per-task", type=int, default=1, help="GPUs per GPU cell's job (default: 1)")
    b.add_argument(
        "--slurm-time",
        type=int,
        default=None,
        metavar="MINUTES",
        help=f"time limit per job (default: the cell timeout + {executors.SLURM_SLACK_MIN} min)",
    )
    b.add_argument(
        "--slurm-max-concurrent",
        type=int,
        default=None,
        metavar="N",
        help=f"tasks of a job array running at once (default: {executors.SlurmOptions.max_concurrent})",
    )
    b.add_argument("--ray-address", default=None, help="Ray cluster to use (default: start a local one)")
    b.add_argument(
        "--ray-cpus-per-cell",
        type=int,
        default=None,
        metavar="N",
        help="CPUs a CPU cell asks of Ray (default: all of the largest node, so cells never share one)",
    )
    b.add_argument(
        "--share-nodes",
        action="store_true",
        help="let CPU timing cells share a cluster node (Slurm: no --exclusive); faster, timings less clean",
    )
    b.add_argument("--dry-run", action="store_true", help="print the planned cells and exit")
    b.set_defaults(func=cmd_bench)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness",
        description="dlcompare: compare deep-learning frameworks on one workload spec, honestly timed.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="adapters (available or why not) and workloads").set_defaults(func=cmd_list)

    bench_defaults = {"workload": "all", "data": "resident", "strategy": "all", "sweep": None}
    _bench_arguments(sub.add_parser("bench", help="run a matrix of cells and write reports/<run-id>/"), bench_defaults)
    sweep_defaults = {"workload": "mlp", "data": "resident", "strategy": "exact", "sweep": DEFAULT_SWEEP}
    _bench_arguments(
        sub.add_parser("sweep", help=f"bench over the values of one spec field (default --sweep {DEFAULT_SWEEP})"),
        sweep_defaults,
    )

    fidelity_defaults = {
        "workload": fidelity.WORKLOAD,
        "data": "resident",
        "strategy": "exact",
        "sweep": f"batch_size={fidelity.DEFAULT_BATCH_SIZES}",
    }
    _bench_arguments(
        sub.add_parser(
            "fidelity",
            help="each adapter beside its framework's idiomatic script (fidelity/), interleaved; "
            "writes fidelity.md with adapter / script ratios",
        ),
        fidelity_defaults,
    )

    r = sub.add_parser("report", help="rebuild report.md of a run from its records, or merge several runs")
    r.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    r.add_argument("--out", type=Path, default=None, help="folder of the merged report (several runs)")
    r.set_defaults(func=cmd_report)

    k = sub.add_parser("check", help="run the conformance checks against an adapter, in plain words")
    k.add_argument("adapter", help="an adapter, a framework family, all, or a comma list")
    k.add_argument("--workload", default="all", help="all, or a comma list of workloads")
    k.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the adapter computes")
    k.set_defaults(func=cmd_check)

    d = sub.add_parser("doctor", help="each framework's build (CPU-only or CUDA), the GPUs it sees, what to fix")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("compare", help="compare matching cells of two runs (before/after, two machines)")
    c.add_argument("run_a", type=Path, help="the baseline run folder")
    c.add_argument("run_b", type=Path, help="the run compared with it")
    c.add_argument("--out", type=Path, default=None, help="markdown file (default: RUN_B/compare-<A>.md)")
    c.set_defaults(func=cmd_compare)
    sub.add_parser("calibrate", help="A/A calibration of the verdict rules on this machine (--help for its options)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:  # its own options (harness.calibrate)
        from harness import calibrate

        return calibrate.main(argv[1:])
    args = parser().parse_args(argv)
    return args.func(args)

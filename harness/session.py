"""A bench run from plan to report: ``bench``, ``sweep`` and ``fidelity`` once their options are parsed.

A ``Session`` owns one run: its plan (new, or read back from plan.json to resume), its run folder
and the lock on it, the executor its rounds run on (harness.running.executors: this machine or a
cluster, one interface), and the files it writes there (env.json, plan.json, results.jsonl,
the report). harness.cli only parses arguments and calls ``bench``.

Why harness/session.py and not harness/running/session.py: a run asks each framework for its
build (harness.checks.doctor), pairs adapters with idiomatic scripts (harness.checks.fidelity),
and ends with the report and its physics check (harness.reporting): parts above running/ in the
import graph (tests/test_imports_graph.py). Inside running/ it would be an upward arrow; here it
sits at the top, beside cli.py, below nothing but cli.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tabulate import tabulate

from adapters import AdapterInfo, discover
from harness import env, processes, records
from harness.checks import backends, doctor, fidelity
from harness.install import environments, variant
from harness.measuring import contention, floors, peak, timing
from harness.reporting import report
from harness.reporting.hardware import physics_violations
from harness.run_folder import PLAN, fail, in_use, lock, run_id_error, storage_failure, unwritable, write_failed
from harness.running import devices, executors, kernel_jit, runner
from harness.running.executors import Executor
from harness.running.plan import PlanError, plan, twins
from harness.running.progress import MatrixProgress
from harness.running.rounds import Run
from harness.stats.cells import combine_all

Adapters = Mapping[str, AdapterInfo]
RESUME = "python -m harness bench --resume"


def bench(args: argparse.Namespace) -> int:
    """``bench`` (``sweep``, ``fidelity``) with its parsed options: plan or resume a run, print it
    (--dry-run) or run it; the exit code (0, 1 under --strict, 2 for an error, 130 interrupted)."""
    adapters = discover()
    try:
        session = Session.open(args, adapters)
    except (PlanError, records.RecordError) as exc:
        return fail(str(exc))
    if args.dry_run:
        session.dry_run()
        return 0
    return session.execute(lambda run_dir: executor_of(args, run_dir, adapters), args.strict)


class Session:
    """One bench run: ``run_dir``, its plan ``run``, whether it resumes an earlier one, and the
    adapters it runs."""

    def __init__(self, run_dir: Path, run: Run, adapters: Adapters, resumed: bool) -> None:
        self.run_dir, self.run, self.adapters, self.resumed = run_dir, run, adapters, resumed
        #: The user's own calibration (``--calibration``), recorded in env.json for the report's Method.
        self.calibration: Path | None = None
        #: ``--rank-under-load``: contended cells ranked, their load stated (recorded in env.json).
        self.rank_under_load = False

    @classmethod
    def open(cls, args: argparse.Namespace, adapters: Adapters) -> Session:
        """The run of ``--resume RUN_DIR``, or a new one planned from the options; nothing is
        written. Raises PlanError or RecordError."""
        if args.resume:
            return cls(args.resume, resumed_run(args.resume, adapters), adapters, resumed=True)
        run_dir, run = new_run(args, adapters)
        session = cls(run_dir, run, adapters, resumed=False)
        session.calibration = getattr(args, "calibration", None)
        session.rank_under_load = bool(getattr(args, "rank_under_load", False))
        return session

    @property
    def results(self) -> Path:
        return self.run_dir / records.RESULTS

    def dry_run(self) -> None:
        """The planned cells, each with the reason it will be skipped where that is known without
        starting a framework (not installed, declined by ``supports``, no input pipeline, no GPU)."""
        cells = self.run.cells
        rows, skipped = [], 0
        for c in cells:
            strategy = records.strategy_override(c) or "-"
            others = list(records.setting_overrides(c))
            others += [f"{k}={v}" for k, v in sorted(c.get("pipeline", {}).items())]
            device = c["device_requested"]
            reason = runner.skip_reason(self.adapters[records.base_adapter(c)], c) or devices.no_gpu_reason(device)
            skipped += bool(reason)
            label = c["adapter"] + (" (script)" if c.get("script") else "")
            row = [label, c["workload"], strategy, c.get("data", "-"), device, " ".join(others) or "-", reason or ""]
            rows.append(row)
        headers = ["adapter", "workload", "strategy", "data", "device", "overrides", "will skip: reason"]
        print(tabulate(rows, headers, tablefmt="simple"))
        planned = f"{len(cells)} cells planned ({skipped} will be skipped), {self.run.rounds} rounds each"
        print(f"{planned}; nothing was run.")

    def execute(self, make_executor: Callable[[Path], Executor], strict: bool = False) -> int:
        """Run it, holding the folder's lock: the exit code. ``make_executor(run_dir)`` gives the
        executor (raising ExecutorError: one line, exit 2, before anything is measured). A full
        disk, a quota or an I/O error mid-run is one line and exit 2, the records written kept."""
        run_dir = self.run_dir
        why = unwritable(run_dir)
        if why:
            return fail(f"{'--resume' if self.resumed else '--out'}: cannot write to {run_dir}: {why}")
        held = lock(run_dir)
        if held is None:
            return fail(in_use(run_dir, "bench"))
        with held:
            try:  # under the lock, again: another bench may have written the folder since the plan
                if self.resumed:
                    self.run = resumed_run(run_dir, self.adapters)
                elif self.results.exists():
                    raise PlanError(f"{run_dir} already holds results; resume it with --resume {run_dir}")
            except (PlanError, records.RecordError) as exc:
                return fail(str(exc))
            try:
                return self._run(make_executor, strict)
            except OSError as exc:  # a full disk, a quota, an I/O error: one line, exit 2
                if not storage_failure(exc):
                    raise
                return write_failed(exc, run_dir, RESUME)

    def _run(self, make_executor: Callable[[Path], Executor], strict: bool) -> int:
        refused = self.check_library_path()
        if refused:
            return fail(refused)
        try:  # before anything is measured: a missing extra or an unreachable cluster fails at once
            executor = make_executor(self.run_dir)
        except executors.ExecutorError as exc:
            return fail(str(exc))
        try:
            if not self.resumed:
                self.start()
                backends.check_model_files(self.adapters, self.run.cells, self.results, self.run.timeout_s)
            todo = self.run.todo(self.results)
            interrupted = self.run_rounds(executor, todo)
            return self.finish(bool(todo), interrupted, strict)
        finally:
            executor.close()

    def check_library_path(self) -> str | None:
        """The doctor's LD_LIBRARY_PATH check (harness.checks.doctor.library_path_problems), before
        any worker starts: a folder of CUDA libraries of another major than an environment's. The
        refusal (one line per folder, with the major expected) where a cell asks for a GPU, whose
        workers would load them; otherwise each printed as a warning (a new run's env.json keeps
        them, in its doctor's findings) and None."""
        problems = doctor.library_path_problems()
        if not problems:
            return None
        if any(c["device_requested"] != "cpu" for c in self.run.cells):
            return "; ".join(problems) + " (make doctor checks it; DEVICE=cpu runs on the CPU alone)"
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        return None

    def start(self) -> None:
        """A new run's env.json (the machine, each framework's build, device peaks, kernel floors)
        and plan.json (its cells, with their kernel floors, so a resumed run keeps them)."""
        cells, run_dir = self.run.cells, self.run_dir
        threads = cells[0]["threads"] if cells else env.default_threads()
        command = ["python -m harness", *sys.argv[1:]]
        info = env.capture(threads, command, [m for a in self.adapters.values() for m in a.cls.requires])
        info["precision"] = cells[0]["precision"] if cells else "fp32"
        if self.calibration is not None:  # a rebuilt report quotes it too
            info["calibration"] = str(self.calibration)
        if self.rank_under_load:  # the report reads it (harness.reporting.model.load_runs)
            info["rank_under_load"] = True
        info["load_at_start"] = load = load_at_start()
        print(load_note(load, self.rank_under_load, threads, os.cpu_count() or 1), flush=True)
        info["environments"] = environments.describe()  # one per CUDA major on a GPU variant
        phases = info["phases_s"] = {"start-up and plan": processes.age_s()}
        print("asking each framework for its build (doctor) ...", flush=True)
        envs = {c["env"]: c["python"] for c in cells if c.get("env")}
        with timed(phases, "doctor"):
            names = sorted({records.base_adapter(c) for c in cells})
            info["doctor"] = doctor.diagnose(self.adapters, threads, names, envs)
        with timed(phases, "kernel JIT warm-up"):
            info["kernel_jit"] = _warm_up(self.adapters, cells, info["doctor"])
        if info["kernel_jit"]:
            print(warm_up_note(phases["kernel JIT warm-up"], self.run.budget_s), flush=True)
        print("measuring device peaks (matmul, copy) ...", flush=True)
        with timed(phases, "device peaks"):
            info["peaks"] = runner.measure_peaks(_peak_devices(cells, info), threads, info["precision"])
        print("measuring kernel floors (each step's matmuls and convolutions alone) ...", flush=True)
        with timed(phases, "kernel floors"):
            found = floors.kernel_floors(cells, _peak_devices(cells, info), threads, info["precision"])
        for c in cells:  # in plan.json too, so a resumed run's cells keep them
            c["kernel_floor_s"] = found["floors"][c["cell_id"]]
        info["kernel_floors"] = {k: found[k] for k in ("kernels", "fastest_library", "errors", "left_out")}
        records.write_json(run_dir / records.ENV, info)
        run = self.run
        plan_json = {"timeout_s": run.timeout_s, "rounds": run.rounds, "budget_s": run.budget_s, "cells": cells}
        records.write_json(run_dir / PLAN, plan_json, indent=1)

    def run_rounds(self, executor: Executor, todo: list[tuple[records.Cell, int]]) -> bool:
        """The rounds still to run, on ``executor``; whether Ctrl-C or SIGTERM interrupted them."""
        run, run_dir = self.run, self.run_dir
        print(
            f"run {run_dir.name}: {len(run.cells)} cells x {run.rounds} rounds, {len(todo)} to run{executor.where}, "
            f"writing {run_dir}",
            flush=True,
        )
        try:
            with processes.terminated_as_interrupt(), MatrixProgress(len(todo)) as progress:
                progress.on_generation = lambda: self.provisional_report(progress)
                executor.run(todo, run, self.results, progress)
        except KeyboardInterrupt:
            return True
        return False

    def provisional_report(self, progress: MatrixProgress) -> None:
        """report.md and report.html from the records so far, marked provisional (how many processes
        ran, how many may follow, when the budget ends); the final report replaces them. Without
        pictures: a page between generations costs the run a second, not the plots' time."""
        if not self.results.exists():
            return
        said = f"{progress.done} of {progress.total} planned processes have run"
        if progress.most > progress.total:
            said += f" (a budget may add generations, up to {progress.most})"
        if progress.budget is not None and progress.budget.total_s is not None:
            ends = time.time() + max(progress.budget.left(), 0) + progress.budget.reserve_s
            said += f"; the run ends by about {time.strftime('%H:%M', time.localtime(ends))}"
        report.write(self.run_dir, provisional=said + ". This page is replaced by the final report.")

    def finish(self, ran: bool, interrupted: bool, strict: bool) -> int:
        """After the rounds: the peaks again (if rounds ran to the end), the report and its physics
        check; the exit code (130 interrupted; 1 where the report could not be written, or under
        ``strict`` with a failed cell or a violation; every record is kept either way)."""
        run_dir = self.run_dir
        problems: list[str] = []
        if not interrupted and ran:
            print("measuring device peaks again (the run keeps the better of start and end) ...", flush=True)
            info = records.load_env(run_dir)
            phases = info.setdefault("phases_s", {})
            with timed(phases, "device peaks again"):
                end = runner.measure_peaks(
                    list(info.get("peaks", {})), info.get("threads", 1), info.get("precision", "fp32")
                )
            info["peaks"] = peak.best_of(info.get("peaks", {}), end)
            if not self.resumed:  # a resumed run's process started part-way: its age is no run's length
                info["report_at_s"] = processes.age_s()
            records.write_json(run_dir / records.ENV, info)
        report_failed = False
        if self.results.exists():
            try:
                print(f"report: {report.write(run_dir)}")
            except OSError:
                raise  # the disk or the path: execute's one-line error with the resume command
            except Exception as exc:  # noqa: BLE001 - a report bug must not cost the run its resume line
                report_failed = True
                print(
                    f"report: not written ({type(exc).__name__}: {exc}); every record is kept in {self.results}; "
                    f"rebuild it with: python -m harness report {run_dir}",
                    file=sys.stderr,
                )
            if (run_dir / "fidelity.md").exists():
                print(f"fidelity: {run_dir / 'fidelity.md'}")
            measured = records.load(self.results)
            cells_done = combine_all([r for r in measured if not records.is_idiomatic(r)])
            problems = physics_violations(cells_done, records.load_env(run_dir))
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr)
        if interrupted:
            print(f"interrupted; finished cells are kept. Resume with: {RESUME} {run_dir}")
            return 130
        failed = [r for r in records.load(self.results) if r["status"] == "failed"]
        if strict and (failed or problems):
            print(f"{len(failed)} failed cells, {len(problems)} physics violations (--strict)", file=sys.stderr)
            return 1
        return 1 if report_failed else 0


@contextmanager
def timed(phases: dict[str, float], name: str) -> Iterator[None]:
    """Set ``phases[name]`` to the seconds the block took (env.json's ``phases_s``: the run's own
    start and close, which no record holds; harness.reporting.run_time). A resumed run's close
    replaces the first process's."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = time.perf_counter() - t0


def new_run(args: argparse.Namespace, adapters: Adapters) -> tuple[Path, Run]:
    """Plan a new run from bench's options: its folder and plan. Raises PlanError; writes nothing."""
    if args.threads is not None and args.threads < 1:
        raise PlanError(f"--threads must be >= 1, got {args.threads}")
    cores = os.cpu_count() or 1
    if args.threads is not None and args.threads > cores:  # one rule for every executor
        raise PlanError(f"--threads {args.threads} is more than the {cores} logical cores of this machine")
    bad_name = run_id_error(args.run_id)
    if bad_name:
        raise PlanError(bad_name)
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
    if getattr(args, "profile_ops", False):  # the worker writes each cell's trace under this folder
        cells = [{**c, "profile_ops": str(run_dir.resolve())} for c in cells]
    return run_dir, Run(cells, args.rounds or profile.rounds, args.timeout or profile.timeout_s, args.budget)


def _script_names() -> str:
    return ", ".join(sorted(fidelity.scripts())) or "none"


def resumed_run(run_dir: Path, adapters: Adapters) -> Run:
    """The plan of an earlier run (its rounds without a record run on resume); raises PlanError."""
    plan_path = run_dir / PLAN
    if not plan_path.is_file():
        raise PlanError(f"{run_dir} is not a run folder (no {PLAN}); valid: a folder written by bench")
    try:
        saved = json.loads(plan_path.read_text())
        task = saved.get("task") if isinstance(saved, dict) else None
        run = Run(saved["cells"], saved.get("rounds", 1), saved["timeout_s"], saved.get("budget_s"))
    except (ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"{plan_path} is damaged ({type(exc).__name__}: {exc}); start the run again") from None
    if task == "export":  # harness.export's plan: its own resume
        raise PlanError(f"{run_dir} is an export run; resume it with: python -m harness export --resume {run_dir}")
    unknown = sorted({records.base_adapter(c) for c, _ in run.todo(run_dir / records.RESULTS)} - set(adapters))
    if unknown:
        raise PlanError(f"adapters of that run are not installed here: {', '.join(unknown)}")
    return run


def executor_of(args: argparse.Namespace, run_dir: Path, adapters: Adapters) -> Executor:
    """The executor bench's options name (``--executor``, ``--slurm-*``, ``--ray-*``,
    ``--share-nodes``); raises ExecutorError."""
    for flag, value in (("--slurm-time", args.slurm_time), ("--slurm-max-concurrent", args.slurm_max_concurrent)):
        if args.executor != "local" and value is not None and value < 1:
            raise executors.ExecutorError(f"{flag} must be >= 1, got {value}")
    slurm = executors.SlurmOptions(
        partition=args.slurm_partition,
        gpus_per_task=args.slurm_gpus_per_task,
        time_min=args.slurm_time,
        max_concurrent=args.slurm_max_concurrent or executors.SlurmOptions.max_concurrent,
        share_nodes=args.share_nodes,
    )
    return executors.executor(args.executor, run_dir, adapters, slurm, args.ray_address, args.ray_cpus_per_cell)


#: Seconds the bench watches the machine's load before it starts (``load_at_start``).
LOAD_WINDOW_S = 1.0


def load_at_start(window_s: float = LOAD_WINDOW_S) -> dict[str, float]:
    """What other processes kept busy while the bench looked, before it started anything:
    ``other_cores`` (cores, from /proc/stat) and ``steal`` (the hypervisor's share)."""
    load = contention.MachineLoad()
    load.start([])
    time.sleep(window_s)
    load.stop()
    return {"other_cores": round(load.other_cores, 2), "steal": round(load.steal, 3)}


def load_note(
    load: Mapping[str, float], rank_under_load: bool = False, threads: int | None = None, cores: int | None = None
) -> str:
    """The start's load in words, and what it costs where it is high: a cell that runs beside more
    than CONTENDED_CORES other cores is marked contended and ranked in no verdict, unless the run
    ranks under load (``--rank-under-load``), when its verdicts state that load. Where a cell's
    ``threads`` outnumber the ``cores`` the load leaves free, it says so: such a cell's threads wait
    on the busy cores, and the calibration under load found its verdicts unreliable."""
    said = f"machine load at the start: {load['other_cores']:.2f} other cores busy"
    said += f", hypervisor steal {load['steal']:.1%}" if load.get("steal") else ""
    if load["other_cores"] <= records.CONTENDED_CORES:
        return said
    said += f"; above {records.CONTENDED_CORES:g}, a cell measured so is marked contended: the turns wait for quiet"
    if rank_under_load:
        said += (
            ", and a machine that never quiets has its cells ranked all the same (--rank-under-load), the load "
            "stated beside every verdict"
        )
    else:
        said += (
            " and a machine that never quiets leaves its cells unranked (--rank-under-load, LOAD=rank: ranked "
            "all the same, the load stated beside every verdict)"
        )
    free = max(1, (cores or 0) - math.ceil(load["other_cores"] - records.CONTENDED_CORES))
    if threads and cores and threads > free:
        said += (
            f"; each cell's {threads} threads share the busy cores, which makes its steps erratic (the calibration "
            f"under load: docs/troubleshooting.md#a-busy-machine): --threads {free} keeps them on the free "
            f"core{'s' * (free > 1)}"
        )
    return said


def warm_up_note(seconds: float, budget_s: float | None) -> str:
    """What the kernel JIT warm-up took, and that a budget counts it: harness.running.budget counts
    from the bench command's start, so the warm-up, like the doctor, the peaks and the floors, is
    in BUDGET and the rounds get what is left. env.json's ``phases_s`` and ``kernel_jit`` keep it,
    and the report's run-time and hardware sections show it."""
    said = f"kernel JIT warm-up: {seconds:.0f} s before the first cell"
    if budget_s is None:
        return f"{said} (no budget: the rounds are fixed)"
    return (
        f"{said}, {seconds / budget_s:.0%} of the {budget_s / 60:g}-minute budget, which counts it as it counts "
        "the run's whole start; the driver's compute cache keeps these kernels, so a later run's warm-up is short"
    )


def _warm_up(
    adapters: Mapping[str, AdapterInfo], cells: Sequence[records.Cell], found: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The kernel JIT warm-ups (harness.running.kernel_jit) of the builds that ship only PTX for
    this GPU, before any GPU cell, whatever the framework selection; [] where none needs one."""
    needs = kernel_jit.needs_of(found["frameworks"])
    gpu_cells = [c for c in cells if c["device_requested"] != "cpu"]
    return kernel_jit.warm_up(adapters, gpu_cells, needs) if needs and gpu_cells else []


def _peak_devices(cells: Sequence[records.Cell], info: Mapping[str, Any]) -> list[str]:
    wanted = {c["device_requested"] for c in cells}

    def here(d: str) -> bool:  # a plugin's device: where its hook finds it
        return d == "cpu" or (bool(info["gpus"]) if d == "cuda" else devices.no_gpu_reason(d) is None)

    return [d for d in devices.names() if d in wanted and here(d)]

"""Command line: ``python -m harness COMMAND``: list, bench, sweep, crossover, fidelity, export, report,
check, doctor, compare, calibrate.

Parsing only: each command is one call (a bench run is harness.session)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from adapters import PluginError, discover
from adapters.base import PRECISIONS
from harness import env, export, processes, records, run_folder, session
from harness.checks import conformance, doctor, fidelity
from harness.install import variant
from harness.measuring import floors, timing
from harness.reporting import calibration_note, compare, report
from harness.running import clusters, devices, executors
from harness.running.plan import DATA_MODES, DEVICES, PlanError, parse_twins, select_adapters, select_workloads
from workloads import STRATEGIES, WORKLOADS

DEFAULT_OUT = Path("reports")
DEFAULT_SWEEP = "batch_size=16,32,64,128,256,512,1024"
#: ``crossover``'s defaults: the mlp from narrower than the seed's to wider than a 16-core CPU keeps
#: up with, and its batch likewise, on one framework (FRAMEWORK= adds others). On one H200 (16 cores
#: beside it), 32 cells of two adapters spent 3.4 minutes before their first generation (kernel
#: floors 2.8 of them, cached for the machine's later runs) and 5.3 on one generation
#: (evidence/gpu-crossover-h200-20261128): by those costs, 16 cells and 12 minutes should allow
#: three generations (an estimate: not yet timed on a GPU).
CROSSOVER_SWEEP = "hidden=64,256,1024,4096;batch_size=16,128,1024,8192"
CROSSOVER_FRAMEWORK = "torch-eager"
CROSSOVER_BUDGET = "12m"


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


def _own_calibration(args: argparse.Namespace) -> str | None:
    """Why ``--calibration`` cannot be read (None where it can, or none was given)."""
    if getattr(args, "calibration", None) is None:
        return None
    try:
        calibration_note.own(args.calibration)
    except calibration_note.CalibrationError as exc:
        return str(exc)
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    if (bad := _own_calibration(args)) is not None:
        return run_folder.fail(bad)
    try:  # refused before anything is measured, not at the kernel floors
        floors.left_out()
    except ValueError as exc:
        return run_folder.fail(str(exc))
    if getattr(args, "model", None):
        args.workload = args.model
        args.framework = "keras" if args.framework == "all" else args.framework
    return session.bench(args)


def cmd_crossover(args: argparse.Namespace) -> int:
    """``sweep`` on the CPU and the GPU taking turns; refused, before anything runs, without a GPU."""
    if variant.detect().driver is None:
        return run_folder.fail(
            "crossover: this machine has no NVIDIA GPU (nvidia-smi finds no driver), and the crossover times "
            "every cell on the CPU and on a GPU, taking turns. On a CPU-only machine `make sweep` sweeps the "
            "CPU alone; run `make crossover` on a GPU machine for where the GPU starts to win"
        )
    return cmd_bench(args)


def cmd_export(args: argparse.Namespace) -> int:
    return export.main(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    print("asking each framework in its own process ...", flush=True)
    adapters = discover()
    found = doctor.diagnose(adapters, env.default_threads())
    print(doctor.render(found))
    ok = doctor.healthy(found)
    if not found["gpus"]:
        print("\n" + doctor.MAPS_WOULD)
        return 0 if ok else 1
    maps = doctor.library_maps(adapters, env.default_threads())
    print("\n" + doctor.render_maps(maps))
    return 0 if ok and all(r["verdict"] == "ok" for r in maps) else 1


def cmd_report(args: argparse.Namespace) -> int:
    first, *others = args.run_dirs
    if others and args.out is None:
        return run_folder.fail("merging several runs needs --out DIR for the merged report")
    if (bad := _own_calibration(args)) is not None:
        return run_folder.fail(bad)
    try:
        path = report.write(first, others, args.out, calibration=args.calibration, rank_under_load=args.rank_under_load)
    except records.RecordError as exc:
        return run_folder.fail(str(exc))
    print(f"report: {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    adapters = discover()
    try:
        names = select_adapters(args.adapter, adapters)
        variants = conformance.all_variants(select_workloads(args.workload))
    except PlanError as exc:
        return run_folder.fail(str(exc))
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
        text = compare.build(args.run_a, args.run_b, across_machines=args.across_machines)
    except (records.RecordError, compare.DifferentMachines) as exc:
        return run_folder.fail(str(exc))
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


def _twins(text: str) -> list[float | str]:
    try:
        return parse_twins(text)
    except PlanError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: ``--rank-under-load``'s help (bench and report).
RANK_UNDER_LOAD_HELP = (
    "on a machine that never quiets: rank the cells that ran beside other CPU load (contended) all the same, "
    "the load stated beside every verdict, rather than leave them unranked; the error rate of such a ranking is "
    "the loaded calibration's (docs/measurement.md#calibration)"
)

#: ``--calibration``'s help (bench and report).
CALIBRATION_HELP = (
    "your own calibration (a calibration-<K>-generations.json from harness calibrate, or its folder), "
    "quoted in the Method beside the committed evidence/calibrations.json"
)


def _bench_arguments(b: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    b.add_argument("--calibration", type=Path, default=None, metavar="PATH", help=CALIBRATION_HELP)
    b.add_argument("--rank-under-load", action="store_true", help=RANK_UNDER_LOAD_HELP)
    b.add_argument(
        "--framework",
        default=defaults.get("framework", "all"),
        help="all, an adapter, a framework family, or a comma list",
    )
    b.add_argument(
        "--workload",
        default=defaults["workload"],
        help=f"all, or a comma list of: {', '.join(WORKLOADS)}, or Keras model files (.py paths)",
    )
    b.add_argument(
        "--model",
        help="a Keras 3 model file (docs/your-keras-model.md): the run's workload, on every Keras adapter "
        "unless --framework narrows it",
    )
    b.add_argument(
        "--device", default=defaults.get("device", "auto"), help=f"one or a comma list of: {', '.join(DEVICES)}"
    )
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
        "--sweep",
        default=defaults["sweep"],
        metavar="FIELD=V1,V2,...",
        help="run every cell for each value; several axes separated by ';' (each varied alone); a list field "
        "(the mlp's hidden) takes one number for all its entries",
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
        default=defaults.get("budget"),  # a string default goes through _duration
        metavar="TIME",
        help="time for the whole run, e.g. 15m: rounds after the first stop when it is spent, and what is left "
        "goes to more generations, the groups with the fewest first (default: the profile's fixed rounds)",
    )
    b.add_argument(
        "--twins",
        type=_twins,
        default=None,
        metavar="F,F,...",
        help="calibration: every cell also runs as identical twins (F=0), twins slowed by F of a step "
        "(0.1: 10%%) or by a wait a step (50ms), named <adapter>~twin<i>, ~slow<percent> or ~wait<ms> "
        "(see make calibrate)",
    )
    b.add_argument(
        "--profile-ops",
        action="store_true",
        help="after each cell's timing (round 1), a profiled pass under its framework's profiler: where the "
        "step's time goes by op category, and a trace per cell in RUN_DIR/traces/ (see docs/profiling.md)",
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
        help=f"time limit per job (default: the cell timeout + {clusters.SLURM_SLACK_MIN} min)",
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

    crossover_defaults = {
        "workload": "mlp",
        "data": "resident",
        "strategy": "exact",
        "sweep": CROSSOVER_SWEEP,
        "framework": CROSSOVER_FRAMEWORK,
        "device": "cpu,cuda",
        "budget": CROSSOVER_BUDGET,
    }
    crossover = sub.add_parser(
        "crossover",
        help="CPU against GPU, taking turns in one run, along the mlp's width and the batch: where the GPU "
        f"starts to win (default --sweep {CROSSOVER_SWEEP!r}, --framework {CROSSOVER_FRAMEWORK}, "
        f"--budget {CROSSOVER_BUDGET}); needs a GPU",
    )
    _bench_arguments(crossover, crossover_defaults)
    crossover.set_defaults(func=cmd_crossover)

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

    e = sub.add_parser(
        "export",
        help="export each model (mlp, cnn), reload it in a fresh process and serve it: export time, size, "
        "cold load, batch-1 p50/p99 latency, throughput, parity (docs/export.md)",
    )
    export.add_arguments(e, DEFAULT_OUT)
    e.set_defaults(func=cmd_export)

    r = sub.add_parser("report", help="rebuild report.md of a run from its records, or merge several runs")
    r.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    r.add_argument("--out", type=Path, default=None, help="folder of the merged report (several runs)")
    r.add_argument("--calibration", type=Path, default=None, metavar="PATH", help=CALIBRATION_HELP)
    r.add_argument("--rank-under-load", action="store_true", help=RANK_UNDER_LOAD_HELP)
    r.set_defaults(func=cmd_report)

    k = sub.add_parser("check", help="run the conformance checks against an adapter, in plain words")
    k.add_argument("adapter", help="an adapter, a framework family, all, or a comma list")
    k.add_argument("--workload", default="all", help="all, or a comma list of workloads")
    k.add_argument("--device", default="cpu", choices=devices.names(), help="where the adapter computes")
    k.set_defaults(func=cmd_check)

    d = sub.add_parser("doctor", help="each framework's build (CPU-only or CUDA), the GPUs it sees, what to fix")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("compare", help="compare matching cells of two runs (before/after, two machines)")
    c.add_argument("run_a", type=Path, help="the baseline run folder")
    c.add_argument("run_b", type=Path, help="the run compared with it")
    c.add_argument("--out", type=Path, default=None, help="markdown file (default: RUN_B/compare-<A>.md)")
    c.add_argument(
        compare.ACROSS_FLAG,
        dest="across_machines",
        action="store_true",
        help="give verdicts even where A and B ran on different kinds of machine (CPU model, microcode, "
        "instruction sets, kernel, ...), under a warning; without it such a comparison is refused",
    )
    c.set_defaults(func=cmd_compare)
    sub.add_parser("calibrate", help="A/A calibration of the verdict rules on this machine (--help for its options)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        with processes.terminated_as_interrupt():  # SIGTERM kills the processes started, as Ctrl-C does
            if argv[:1] == ["calibrate"]:  # its own options (harness.calibrate)
                from harness import calibrate

                return calibrate.main(argv[1:])
            args = parser().parse_args(argv)
            return args.func(args)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: every process it started was stopped", file=sys.stderr)
        return 130

"""``python -m harness.gpu_study`` (``make gpu-study``): the GPU user's first answer, in one command.

Four runs on this machine's GPU, in order, each into its own folder under OUT, beside a
``NOTES.md`` that says what ran, with which frameworks (make's locks, or with ``--no-install`` the
machine image's own) and what each run settled:

1. ``crossover``: CPU against GPU along the mlp's width and the batch, taking turns in one run
   (``harness crossover``, its defaults): where the GPU starts to win.
2. ``bench``: every adapter on ``mlp``, ``cnn`` and ``rnn-caption`` on cuda, with a budget meant
   for 3 generations or more: settled pairs, and whether any cell ran beside other load.
3. ``pipelines``: each framework's own input pipeline on cuda (``DATA=loader``, cnn), its
   ``workers`` swept, GPU utilisation beside each step.
4. ``tests``: the whole test suite on the GPU machine.

Each step is one of harness.checks.gpu_check's (``Step``, ``run``): ``summary.md`` is rewritten
after every step, so a study stopped part-way (a short lease) keeps what it finished, and
``--steps`` runs a few. On a machine without an NVIDIA GPU it says so and runs nothing (exit 2);
``--dry-run`` prints the commands anywhere.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import env, processes, records
from harness.checks import gpu_check
from harness.checks.gpu_check import Step
from harness.install import variant
from harness.reporting import crossover, model
from harness.reporting.cells import family_pairs

#: The cuda bench's budget: 3 generations or more of the default's 33 cells on one GPU of the H100
#: class is an estimate (the committed H100 and H200 runs timed mlp alone), not a measurement.
BENCH_BUDGET = "20m"
#: The input-pipeline sweep: the frameworks with a native loader of their own, and the workers swept.
PIPELINE_FRAMEWORKS = "torch-eager,tf-function,jax-jit"
PIPELINE_WORKERS = "workers=0,1,2,4"
PIPELINE_BUDGET = "10m"
#: Test processes of the suite's step (a GPU machine has the cores a 2-core VM lacks).
TEST_WORKERS = 4


def commands(bench_budget: str = BENCH_BUDGET, crossover_budget: str | None = None) -> dict[str, list[str]]:
    """Each step's ``python`` arguments, OUT left to the step (``--out`` is added where it runs)."""
    return {
        "crossover": ["-m", "harness", "crossover", *(["--budget", crossover_budget] if crossover_budget else [])],
        "bench": ["-m", "harness", "bench", "--framework", "all", "--device", "cuda"]
        + ["--workload", "mlp,cnn,rnn-caption", "--budget", bench_budget],
        "pipelines": ["-m", "harness", "sweep", "--framework", PIPELINE_FRAMEWORKS, "--device", "cuda"]
        + ["--workload", "cnn", "--data", "loader", "--sweep", PIPELINE_WORKERS, "--budget", PIPELINE_BUDGET],
        # pytest-xdist is in every lock; an image of its own (INSTALL=0) may lack it: then one process
        "tests": ["-m", "pytest", "-q", *(["-n", str(TEST_WORKERS), "--dist", "loadfile"] if _xdist() else [])]
        + ["--durations=20"],
    }


def _xdist() -> bool:
    return importlib.util.find_spec("xdist") is not None


def judged(run_dir: Path, aim: str) -> tuple[bool, str]:
    """What a run folder settled: its pairs (each judged alone, as the report's first lines count
    them), the generations per workload, the cells that ran beside other load, and a crossover's
    lines where it has them. ``aim``, what the step must show to pass: ``crossover`` (a crossover
    line: with one process per cell it reads the ratios alone), ``quiet`` (settled pairs and no
    contended cell: the bench's aim) or ``ran`` (cells that ran: the loader sweep, which no verdict
    of resident data counts)."""
    if not (run_dir / records.RESULTS).is_file():
        return False, f"no records in {run_dir.name}"
    m = model.load([run_dir])
    pairs = [v for fam in m.families.values() for v in family_pairs(fam)]
    settled = sum(v.settled for v in pairs)
    ok = [r for r in m.recs if r["status"] == "ok"]
    busy = sum(bool(r.get("contended")) for r in ok)
    gens: dict[str, int] = {}
    for r in ok:
        gens[r["workload"]] = max(gens.get(r["workload"], 0), r.get("rounds_done") or 1)
    found = f"{len(ok)} cells ran; {settled} of {len(pairs)} pairs settled; generations: "
    found += ", ".join(f"{w} {n}" for w, n in sorted(gens.items())) + f"; {busy} contended cells"
    lines = crossover.crossover_lines(m.recs)
    if lines:
        found += "; " + " ".join(lines)
    passed = {"crossover": bool(lines), "quiet": settled > 0 and not busy, "ran": bool(ok)}[aim]
    return passed, found


def _run(name: str, args: list[str], aim: str) -> Step:
    verifies = {
        "crossover": "CPU against GPU along the mlp's width and the batch in one run: where the GPU starts to win",
        "bench": "every adapter on mlp, cnn and rnn-caption on cuda, 3 generations or more: settled pairs, and no "
        "cell contended",
        "pipelines": f"each framework's own input pipeline on cuda (cnn, {PIPELINE_WORKERS}): step time and GPU "
        "utilisation per setting",
    }[name]

    def step(out: Path) -> tuple[bool, str]:
        ran, said = gpu_check.run_command(out, name, [*args, "--out", str(out), "--run-id", name])
        ok, found = judged(out / name, aim)
        return ran and ok, f"{said}; {found} ({name}/report.md)"

    return Step(name, verifies, step)


def steps(bench_budget: str = BENCH_BUDGET, crossover_budget: str | None = None) -> tuple[Step, ...]:
    """The study's steps in order (module docstring)."""
    cmd = commands(bench_budget, crossover_budget)
    tests = Step(
        "tests",
        "the whole test suite on the GPU machine (tests/test_cuda.py runs here, not skipped)",
        lambda out: gpu_check.run_command(out, "tests", cmd["tests"]),
    )
    return (
        _run("crossover", cmd["crossover"], "crossover"),
        _run("bench", cmd["bench"], "quiet"),
        _run("pipelines", cmd["pipelines"], "ran"),
        tests,
    )


def default_out(gpus: Sequence[dict[str, str]], day: datetime.date | None = None) -> Path:
    """``evidence/gpu-study-h100-20261201``: the GPU's model in the name, as the committed folders are."""
    name = " ".join(g.get("name", "") for g in gpus[:1])
    found = re.search(r"\b([A-Z]+\d+[A-Za-z]*)\b", name.replace("NVIDIA", ""))
    model_name = found.group(1).lower() if found else "gpu"
    return Path("evidence") / f"gpu-study-{model_name}-{(day or datetime.date.today()):%Y%m%d}"


def notes(out: Path, install: bool, command: str) -> Path:
    """``NOTES.md``: the machine, the frameworks the study ran and where they came from, and each
    step's line from ``summary.md`` (rewritten as the steps go)."""
    gpus = env.gpus()
    if install:
        frameworks = f"make's environments of the {variant.installed() or '?'} variant, each from its lock"
    else:
        held = ", ".join(f"{k} {v}" for k, v in gpu_check.frameworks_here().items()) or "no framework"
        frameworks = f"the machine image's own ({sys.executable}: {held}), not the locks (INSTALL=0)"
    summary = (out / "summary.md").read_text().splitlines()[2:] if (out / "summary.md").is_file() else []
    text = [
        "# GPU study: the GPU user's first answer",
        "",
        f"Command: `{command}`. GPUs: {', '.join(g['name'] for g in gpus) or 'none'}; driver "
        f"{(gpus[0].get('driver') if gpus else None) or '?'}; CPU: {env.fingerprint().get('cpu', '?')}.",
        f"Frameworks: {frameworks}.",
        "",
        "Each folder holds its run's records, env.json and report (`python -m harness report FOLDER` rebuilds it):",
        "",
        *summary,
        "",
    ]
    path = out / "NOTES.md"
    path.write_text("\n".join(text))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gpu_study", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="the study's folder (default: evidence/gpu-study-<gpu>-<day>)"
    )
    parser.add_argument(
        "--bench-budget", default=BENCH_BUDGET, help=f"the cuda bench's budget (default {BENCH_BUDGET})"
    )
    parser.add_argument("--crossover-budget", default=None, help="the crossover's budget (default: its own)")
    parser.add_argument("--steps", help="comma-separated steps to run, the others left out (default: every step)")
    parser.add_argument("--no-install", action="store_true", help="the frameworks this interpreter holds (INSTALL=0)")
    parser.add_argument("--dry-run", action="store_true", help="print each step's command and run nothing")
    args = parser.parse_args(argv)
    planned = steps(args.bench_budget, args.crossover_budget)
    names = [s.name for s in planned]
    only = gpu_check.chosen_steps(parser, args.steps, names)
    if args.dry_run:
        for name, cmd in commands(args.bench_budget, args.crossover_budget).items():
            if only is None or name in only:
                print(f"{name}: python {' '.join(cmd)}")
        return 0
    if variant.detect().driver is None:
        print(
            "gpu-study: no NVIDIA GPU on this machine (no driver answers nvidia-smi): the study times CPU against "
            "GPU and needs one. On this machine: make bench (the CPU), make sweep SWEEP=hidden=64,256,1024 "
            "(the sizes); make gpu-study DRY_RUN=1 prints what it would run.",
            file=sys.stderr,
        )
        return 2
    out = args.out or default_out(env.gpus())
    command = "python -m harness.gpu_study " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        with processes.terminated_as_interrupt():
            code = gpu_check.run(
                out, True, install=not args.no_install, only=only, planned=planned, title="make gpu-study"
            )
    except KeyboardInterrupt:
        code = 130
    print(f"gpu-study: {notes(out, not args.no_install, command)}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())

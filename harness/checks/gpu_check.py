"""``python -m harness.checks.gpu_check OUT`` (``make gpu-check``): the first-GPU self-test, one
folder with everything a maintainer needs to see what broke.

Steps, in order, each writing its own file into OUT and one line of ``summary.md``: the install
(every environment of the variant in place), no file owned twice in any environment, the doctor,
the kernel JIT warm-up of builds that ship only PTX for this GPU (harness.running.kernel_jit),
each framework's one-step smoke test on cuda with the CUDA libraries its worker mapped, the
conformance checks on cuda, the CUDA tests, one short mlp bench on cuda and the driver's compute
cache. On a machine without an NVIDIA GPU the GPU steps are not run: their lines say what they
would verify, and the exit status covers the steps that ran.

``--no-install`` (``make gpu-check INSTALL=0``) checks the frameworks this interpreter already holds
(a GPU image's own, say) instead of make's environments: the install step then lists what it found
and is marked "not checked", since no lock put it there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import cast

from adapters import discover
from harness import env, processes, records
from harness.checks import doctor
from harness.install import environments, variant
from harness.records import Cell
from harness.running import kernel_jit

STEP_TIMEOUT_S = 3600
#: Seconds the ownership check of one environment may take.
OWNERSHIP_TIMEOUT_S = 600
BENCH_BUDGET = "10m"
#: The distributions the install step lists where no make install put them (``--no-install``).
FRAMEWORK_DISTRIBUTIONS = ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "keras",
                           "tensorflow", "tensorflow-cpu", "onnxruntime", "onnxruntime-gpu")  # fmt: skip


@dataclass(frozen=True)
class Step:
    name: str
    verifies: str
    run: Callable[[Path], tuple[bool | None, str]]  # OUT -> (passed, or None: not checked; what it found)
    gpu_only: bool = True


def run_command(out: Path, name: str, args: list[str]) -> tuple[bool, str]:
    """Run ``python ARGS`` from the repository, its output into OUT/<name>.txt (STEP_TIMEOUT_S at most)."""
    log = out / f"{name}.txt"
    try:
        proc = processes.run([sys.executable, *args], processes.repo_env(), STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.write_text(f"$ python {' '.join(args)}\nno end within {STEP_TIMEOUT_S:g} s\n")
        return False, f"timed out after {STEP_TIMEOUT_S:g} s ({log.name})"
    log.write_text(f"$ python {' '.join(args)}\n(exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}")
    last = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode == 0, f"exit {proc.returncode}: {last[:200]} ({log.name})"


def _pythons() -> dict[str, str]:
    """Each environment make installed, name -> interpreter (this one alone where it recorded none)."""
    return {name: e["python"] for name, e in environments.installed().items()} or {"main": sys.executable}


def check_install(out: Path) -> tuple[bool, str]:
    machine, installed = variant.detect(), variant.installed()
    found = {name: Path(python).is_file() for name, python in _pythons().items()}
    (out / "install.json").write_text(
        json.dumps(
            {
                "machine_wants": machine.variant,
                "reason": machine.reason,
                "installed": installed,
                "environments": environments.installed(),
            },
            indent=1,
        )
    )
    wanted = [e.name for e in variant.ENVIRONMENTS.get(installed or "cpu", ())]
    missing = [n for n in wanted if n != "main" and not found.get(n)]
    ok = installed == machine.variant and not missing and all(found.values())
    what = f"variant {installed} (this machine wants {machine.variant}), environments {', '.join(found)}"
    return ok, what + (f"; missing: {', '.join(missing)}" if missing else "")


def frameworks_here() -> dict[str, str]:
    """The framework distributions this interpreter holds, name -> version."""
    found = {}
    for name in FRAMEWORK_DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def check_preinstalled(out: Path) -> tuple[None, str]:
    """The install step under ``--no-install``: what this interpreter holds, not checked against a lock."""
    found = frameworks_here()
    (out / "install.json").write_text(
        json.dumps({"installed_by": "not make (INSTALL=0)", "python": sys.executable, "frameworks": found}, indent=1)
    )
    listed = ", ".join(f"{k} {v}" for k, v in found.items()) or "no framework"
    return None, f"not checked (INSTALL=0): {sys.executable} {sys.version.split()[0]} holds {listed}"


def check_ownership(out: Path) -> tuple[bool, str]:
    shared, lines = 0, []
    for name, python in _pythons().items():
        proc = processes.run([python, "-m", "harness.checks.ownership"], processes.repo_env(), OWNERSHIP_TIMEOUT_S)
        found = json.loads(proc.stdout)["shared"] if proc.stdout.strip().startswith("{") else {"?": [proc.stderr]}
        shared += len(found)
        lines.append(f"{name} ({python}): {len(found)} paths owned twice")
        lines += [f"  {path}: {', '.join(owners)}" for path, owners in found.items()]
    (out / "ownership.txt").write_text("\n".join(lines) + "\n")
    return shared == 0, "; ".join(ln for ln in lines if not ln.startswith("  ")) + " (ownership.txt)"


def check_doctor(out: Path, installed_only: bool = False) -> tuple[bool, str]:
    """``installed_only`` (``--no-install``): a framework this interpreter lacks is listed, not failed."""
    found = doctor.diagnose(discover(), env.default_threads())
    (out / "doctor.txt").write_text(doctor.render(found) + "\n")
    (out / "doctor.json").write_text(json.dumps(found, indent=1))  # the kernel-jit step reads it
    rows = found["frameworks"]
    absent = [r["adapter"] for r in rows if installed_only and r["next_step"].startswith("not installed")]
    bad = [r["adapter"] for r in rows if not r["next_step"].startswith("ok") and r["adapter"] not in absent]
    what = f"not ok: {', '.join(bad)}" if bad else "every framework build ok"
    return not bad, what + (f"; not installed here: {', '.join(absent)}" if absent else "") + " (doctor.txt)"


def check_libraries(out: Path, installed_only: bool = False) -> tuple[bool, str]:
    """``installed_only`` (``--no-install``): only the frameworks this interpreter holds take the step."""
    adapters = discover()
    # By adapter, not framework: keras-tf absent with TensorFlow leaves keras-torch and keras-jax to check.
    absent = [n for n, a in adapters.items() if installed_only and not a.available]
    names = [n for n in adapters if n not in absent]
    rows = doctor.library_maps(adapters, env.default_threads(), names)
    (out / "libraries.json").write_text(json.dumps(rows, indent=1))
    (out / "libraries.txt").write_text(doctor.render_maps(rows) + "\n")
    bad = [f"{r['adapter']}: {r['verdict']}" for r in rows if r["verdict"] != "ok"]
    what = "; ".join(bad) if bad else f"{len(rows)} framework builds, one CUDA major each"
    return not bad, what + (f"; not installed here: {', '.join(absent)}" if absent else "") + " (libraries.txt)"


def check_kernel_jit(out: Path) -> tuple[bool, str]:
    """Each framework build that ships only PTX for this GPU: one untimed mlp and cnn step each
    (harness.running.kernel_jit), before any step below has a timeout of minutes."""
    doctor_json = out / "doctor.json"
    adapters = discover()
    found = json.loads(doctor_json.read_text()) if doctor_json.is_file() else doctor.diagnose(adapters, 1)
    needs = kernel_jit.needs_of(found["frameworks"])
    cells: list[Cell] = [
        cast(
            Cell,
            {"adapter": a.name, "framework": a.framework, "graph": a.graph, "device_requested": "cuda"}
            | {"threads": env.default_threads(), "workload": w, "overrides": [], "precision": "fp32"},
        )
        for a in adapters.values()
        for w in ("mlp", "cnn")
        if a.available
    ]
    warmed = kernel_jit.warm_up(adapters, cells, needs)
    (out / "kernel-jit.json").write_text(json.dumps({"needs": needs, "warmed": warmed}, indent=1))
    if not warmed:
        return True, "no framework build here needs the driver to JIT its kernels for this GPU (kernel-jit.json)"
    what = [f"{w['framework']}: {w['what']}, {w['status']} in {w['seconds']:.0f} s" for w in warmed]
    return all(w["status"] == "ok" for w in warmed), "; ".join(what) + " (kernel-jit.json)"


def compute_cache_bytes() -> int:
    folder = Path(os.environ.get("CUDA_CACHE_PATH") or Path.home() / ".nv" / "ComputeCache")
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def check_compute_cache(out: Path) -> tuple[bool, str]:
    """The driver's JIT cache after the steps above, and each bench cell's first step (which pays
    any PTX compile the cache did not hold)."""
    results = out / "bench" / records.RESULTS
    firsts = []
    if results.is_file():
        for line in results.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("first_step_s") is not None:
                firsts.append(f"{rec['adapter']} round {rec.get('round')}: first step {rec['first_step_s']:.3f} s")
    size = compute_cache_bytes()
    (out / "compute-cache.txt").write_text(f"compute cache: {size / 2**20:.0f} MiB\n" + "\n".join(firsts) + "\n")
    return True, f"{size / 2**20:.0f} MiB cached; first steps per cell in compute-cache.txt"


def steps(budget: str = BENCH_BUDGET, install: bool = True) -> tuple[Step, ...]:
    """The steps in order; ``budget`` is the bench's, ``install`` False for ``--no-install``."""
    replaced: dict[str, Callable[[Path], tuple[bool | None, str]]]
    if install:
        replaced = {"bench": _bench(budget)}
    else:
        replaced = {
            "install": check_preinstalled,
            "doctor": lambda out: check_doctor(out, installed_only=True),
            "libraries": lambda out: check_libraries(out, installed_only=True),
            "bench": _bench(budget),
        }
    return tuple(
        Step(s.name, s.verifies.replace(BENCH_BUDGET, budget), replaced.get(s.name, s.run), s.gpu_only) for s in STEPS
    )


def _bench(budget: str) -> Callable[[Path], tuple[bool, str]]:
    args = ["-m", "harness", "bench", "--framework", "all", "--device", "cuda", "--workload", "mlp"]
    args += ["--profile", "quick", "--budget", budget]
    return lambda out: run_command(out, "bench", [*args, "--out", str(out), "--run-id", "bench"])


STEPS = (
    Step(
        "install",
        "make install put every environment of the variant this machine wants in place (GPU variants: .venv for "
        "torch, JAX, Flax, Keras on CUDA 13 or 12, .venv-tf for TensorFlow on CUDA 12), each from its lock",
        check_install,
        gpu_only=False,
    ),
    Step(
        "ownership",
        "no path of any environment is installed by two distributions (cu12 and cu13 cuDNN, NCCL)",
        check_ownership,
        gpu_only=False,
    ),
    Step(
        "doctor",
        "every framework build is the one this machine needs, on a GPU a CUDA build that sees it (make doctor)",
        check_doctor,
        gpu_only=False,
    ),
    Step(
        "kernel-jit",
        "a framework build that ships only PTX for this GPU (TensorFlow 2.21 on sm_90: newest SASS sm_89) has "
        "the driver compile its kernels before any timed or time-limited step: one untimed mlp and cnn step, "
        f"up to {kernel_jit.WARM_UP_TIMEOUT_S // 60} minutes, kept in the compute cache",
        check_kernel_jit,
    ),
    Step(
        "libraries",
        "each framework's worker, under its environment's interpreter, takes one mlp training step on cuda "
        "(the one-kernel smoke test) and maps CUDA libraries of one CUDA major only (/proc/self/maps)",
        check_libraries,
    ),
    Step(
        "conformance",
        "every adapter matches the NumPy float64 reference on cuda (harness check all --device cuda, mlp and cnn)",
        lambda out: run_command(
            out, "conformance", ["-m", "harness", "check", "all", "--device", "cuda", "--workload", "mlp,cnn"]
        ),  # fmt: skip
    ),
    Step(
        "cuda-tests",
        "tests/test_cuda.py: placement on the GPU, sync that waits, autotune settings, GPU utilisation sampled, "
        "one CUDA major per framework",
        lambda out: run_command(out, "cuda-tests", ["-m", "pytest", "-q", "-rs", "tests/test_cuda.py"]),
    ),
    Step(
        "bench",
        f"make bench DEVICE=cuda WORKLOAD=mlp (budget {BENCH_BUDGET}) runs every adapter on the GPU to a report",
        _bench(BENCH_BUDGET),
    ),
    Step(
        "compute-cache",
        "the driver's JIT cache holds what the cells compiled (TensorFlow's PTX on sm_90) and each cell's first "
        "step time is listed, so one that paid a compile shows",
        check_compute_cache,
    ),
)


def run(
    out: Path,
    gpu: bool,
    budget: str = BENCH_BUDGET,
    install: bool = True,
    only: Sequence[str] | None = None,
    planned: Sequence[Step] | None = None,
    title: str = "make gpu-check",
) -> int:
    """Run the steps into ``out``; 0 when every step that ran passed (one not checked counts as neither).
    ``only``: the names of the steps to run (a short lease's choice); the others are listed as left out.
    ``planned``: other steps than gpu-check's own (``steps``), under ``title`` (harness.gpu_study).
    ``summary.md`` is rewritten after every step, so a run stopped part-way keeps the steps it finished."""
    out.mkdir(parents=True, exist_ok=True)
    gpus = env.gpus()
    head = f"# {title}: {', '.join(g['name'] for g in gpus) or 'no NVIDIA GPU on this machine'}\n\n"
    if not gpu:
        head += "No GPU here: the steps marked 'would verify' need one and did not run.\n\n"
    lines: list[str] = []
    failed = 0
    planned = steps(budget, install) if planned is None else planned

    def asked(step: Step) -> bool:
        return only is None or step.name in only

    def left_out(step: Step) -> str:
        return f"- left out {step.name} (not in --steps): {step.verifies}"

    def write_summary(after: int) -> None:
        unreached = [f"- not reached {s.name}: {s.verifies}" if asked(s) else left_out(s) for s in planned[after + 1 :]]
        (out / "summary.md").write_text(head + "\n".join(lines + unreached) + "\n")

    for i, step in enumerate(planned):
        if not asked(step):
            line = left_out(step)
        elif step.gpu_only and not gpu:
            line = f"- would verify {step.name}: {step.verifies}"
        else:
            print(f"{step.name} ...", flush=True)
            try:
                ok, found = step.run(out)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the step's processes are stopped, its file may be partial
                lines.append(f"- interrupted {step.name}: {step.verifies}")
                write_summary(i)
                raise
            except Exception as exc:  # noqa: BLE001 - a broken step is a finding, the others still run
                ok, found = False, f"{type(exc).__name__}: {exc}"
            failed += ok is False
            word = "not checked" if ok is None else "ok" if ok else "FAILED"
            line = f"- {word} {step.name}: {step.verifies}. Found: {found}"
        print(line, flush=True)
        lines.append(line)
        write_summary(i)
    print(f"{title.removeprefix('make ')}: {failed} steps failed; {out / 'summary.md'}")
    return 1 if failed else 0


def chosen_steps(parser: argparse.ArgumentParser, text: str | None, names: Sequence[str]) -> list[str] | None:
    """``--steps``: the steps named (None: every step); an unknown or empty one is the parser's error,
    naming the valid ones."""
    only = None if text is None else [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(only or ()) - set(names))
    if only is not None and (unknown or not only):
        parser.error(f"--steps {text!r}: no step named {', '.join(unknown) or 'at all'}; steps: {', '.join(names)}")
    return only


def main(argv: list[str]) -> int:
    global STEP_TIMEOUT_S  # noqa: PLW0603 - one setting for every command step of this process
    parser = argparse.ArgumentParser(prog="python -m harness.checks.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder every step writes into")
    parser.add_argument("--budget", default=BENCH_BUDGET, help=f"the mlp bench's budget (default {BENCH_BUDGET})")
    parser.add_argument("--no-install", action="store_true", help="check this interpreter's own frameworks")
    parser.add_argument("--step-timeout", type=float, default=STEP_TIMEOUT_S, help="seconds each command step may run")
    parser.add_argument("--steps", help="comma-separated steps to run, the others left out (default: every step)")
    args = parser.parse_args(argv)
    STEP_TIMEOUT_S = args.step_timeout
    only = chosen_steps(parser, args.steps, [s.name for s in STEPS])
    try:
        with processes.terminated_as_interrupt():  # a killed gpu-check stops its step's processes too
            return run(args.out, variant.detect().driver is not None, args.budget, not args.no_install, only)
    except KeyboardInterrupt:
        print(f"gpu-check: interrupted; {args.out / 'summary.md'} keeps the steps it finished", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

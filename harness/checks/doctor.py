"""``python -m harness doctor`` (``make doctor``): what each framework's installed build is, which
GPUs it sees, and the next step when that is not what this machine needs.

Each framework is asked in its own worker process (the one adapter per framework family that a
cell would run), so this process imports none of them. The machine's NVIDIA driver comes from
harness.install.variant, the one driver query that harness.running.devices uses too. A folder of
another CUDA major's libraries on LD_LIBRARY_PATH, which every worker inherits, fails the doctor
(``library_path_problems``) and stops a GPU bench before it starts (harness.session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adapters import AdapterInfo
from harness import env
from harness.install import environments, variant
from harness.measuring import cuda_libraries
from harness.records import Cell
from harness.running import kernel_jit, precision, runner

PROBE_TIMEOUT_S = 300


def probe(info: AdapterInfo, threads: int, python: str | None = None) -> dict[str, Any]:
    """The adapter's versions and build from a worker process (under ``python``, another
    environment's interpreter, if given), or {"error": reason}."""
    cell: Cell = {"adapter": info.name, "threads": threads, "device_requested": "auto", "python": python}
    if not info.available and runner.interpreter(info, cell) == sys.executable:
        return {"error": f"not installed: {info.unavailable}"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        try:
            proc = runner.run_worker(info, cell, "probe", out, PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {PROBE_TIMEOUT_S} s"}
        if proc.returncode != 0 or not out.is_file():
            last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return {"error": f"fails to start: {last}"}
        return json.loads(out.read_text())


def representatives(adapters: Mapping[str, AdapterInfo], names: list[str] | None = None) -> list[AdapterInfo]:
    """One adapter per (framework, requirements): keras on torch and keras on JAX are two builds."""
    seen, chosen = set(), []
    for info in adapters.values():
        key = (info.framework, info.cls.requires)
        if (names is None or info.name in names) and key not in seen:
            seen.add(key)
            chosen.append(info)
    return chosen


def build_text(build: dict[str, Any]) -> str:
    if not build:
        return "unknown (the adapter does not say)"
    if build.get("cuda") is None:
        return "CPU-only"
    return f"CUDA {build['cuda']}" + (f", cuDNN {build['cudnn']}" if build.get("cudnn") else "")


def next_step(result: dict[str, Any], machine: variant.Choice, need: dict[str, Any] | None = None) -> str:
    """What the user should do about one framework on this machine ("ok" when nothing); ``need``:
    what the driver must JIT for this GPU (harness.running.kernel_jit.needed), if anything."""
    if "error" in result:
        return result["error"]
    build = result.get("build") or {}
    if not build:
        return "ok"
    gpu_here = machine.driver is not None
    if build.get("cuda") is None:
        if not gpu_here:
            return "ok (no GPU here)"
        if machine.variant == "cpu":
            return f"CPU-only; {machine.reason}: update the driver for GPU builds"
        return f"CPU-only build on a GPU machine: {variant.INSTALL_HINT.format(variant=machine.variant)}"
    if build.get("gpus"):
        if need:
            trouble = kernel_jit.problem(need, build.get("cuda"), machine.driver)
            return trouble or f"ok ({kernel_jit.summary(need)} at first use, before timing)"
        return "ok"
    if not gpu_here:
        return "ok (CUDA build, no GPU here: runs on the CPU)"
    return f"CUDA build sees no GPU: {build.get('error') or 'no reason given'}"


def library_path_problems(
    library_path: str | None = None, found: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """One line per folder of CUDA libraries on ``library_path`` (default: LD_LIBRARY_PATH) whose
    CUDA major is not that of an environment of ``found`` (default: this installation's,
    harness.install.environments.describe); [] where none is (and on a CPU variant)."""
    path = os.environ.get("LD_LIBRARY_PATH", "") if library_path is None else library_path
    return cuda_libraries.wrong_majors(path, environments.describe() if found is None else found)


def diagnose(
    adapters: Mapping[str, AdapterInfo],
    threads: int,
    names: list[str] | None = None,
    envs: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The doctor's findings as data (what env.json keeps): machine, variants, one row per
    framework build, in this environment and in each named one (``envs``: name -> python), and
    ``library_path``: ``library_path_problems``."""
    machine = variant.detect()
    capability = precision.query_compute_cap()[0] if machine.driver else None
    chosen = [(info, env) for info in representatives(adapters, names) for env in [None, *(envs or {})]]
    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:  # the imports overlap
        results = list(pool.map(lambda job: probe(job[0], threads, (envs or {}).get(job[1])), chosen))
    rows = []
    for (info, env_name), result in zip(chosen, results, strict=True):
        build = result.get("build") or {}
        need = kernel_jit.needed(build.get("kernel_archs") or [], capability) if capability else None
        rows.append(
            {
                "framework": info.framework,
                "adapter": f"{info.name}@{env_name}" if env_name else info.name,
                "python": runner.interpreter(
                    info, {"python": (envs or {}).get(env_name) if env_name is not None else None}
                ),
                "versions": result.get("versions", {}),
                "build": build_text(build) if "error" not in result else "-",
                "gpus": build.get("gpus", []),
                "next_step": next_step(result, machine, need),
                "kernel_jit": need,
            }
        )
    return {
        "gpus": env.gpus(),
        "variant_for_machine": machine.variant,
        "variant_reason": machine.reason,
        "variant_installed": variant.installed(),
        "frameworks": rows,
        "library_path": library_path_problems(),
    }


def render(found: dict[str, Any]) -> str:
    from tabulate import tabulate

    gpus = found["gpus"]
    lines = [
        "GPUs: " + ("; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in gpus) or "none"),
        f"installed variant: {found['variant_installed'] or 'none recorded (not installed by make)'}; "
        f"this machine wants {found['variant_for_machine']} ({found['variant_reason']})",
        "",
    ]
    rows = [
        [
            f"{r['framework']} ({r['adapter']})",
            ", ".join(f"{k} {v}" for k, v in r["versions"].items() if not k.endswith("backend")) or "-",
            r["build"],
            ", ".join(r["gpus"]) or "-",
            r["next_step"],
        ]
        for r in found["frameworks"]
    ]
    lines.append(tabulate(rows, ["framework", "version", "build", "GPUs seen", "next step"], tablefmt="simple"))
    lines += ["", *found["library_path"]] if found.get("library_path") else []
    return "\n".join(lines)


def healthy(found: dict[str, Any]) -> bool:
    """Every row ok and no wrong-major CUDA library folder on LD_LIBRARY_PATH."""
    return all(r["next_step"].startswith("ok") for r in found["frameworks"]) and not found.get("library_path")


MAPS_WOULD = (
    "CUDA libraries per framework: no GPU here, nothing to map. On a GPU, each framework's worker (in its own "
    "environment) runs one mlp training step on cuda, then lists the CUDA libraries it mapped (/proc/self/maps) "
    "with the CUDA major of each (from the wheel that installed it), and the doctor fails where one process "
    "mapped two majors."
)


def library_maps(adapters: Mapping[str, AdapterInfo], threads: int, names: list[str] | None = None) -> list[dict]:
    """Per framework build: one training step on the GPU in a worker, then the CUDA libraries the
    worker mapped, their CUDA majors and a verdict ("ok", or what is wrong)."""
    rows = []
    for info in representatives(adapters, names):
        cell: Cell = {
            "run_id": "doctor",
            "adapter": info.name,
            "framework": info.framework,
            "graph": info.graph,
            "workload": "mlp",
            "overrides": [],
            "precision": "fp32",
            "device_requested": "cuda",
            "profile": "quick",
            "threads": threads,
        }
        python = runner.interpreter(info, cell)
        row = {"framework": info.framework, "adapter": info.name, "python": python, "libraries": [], "majors": []}
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "libraries.json"
            try:
                proc = runner.run_worker(info, cell, "libraries", out, PROBE_TIMEOUT_S)
                found = json.loads(out.read_text()) if proc.returncode == 0 and out.is_file() else None
            except subprocess.TimeoutExpired:
                proc, found = None, {"device_failed": f"no answer within {PROBE_TIMEOUT_S} s"}
        if found is None:
            assert proc is not None  # None only where the worker timed out, which sets found
            row["verdict"] = f"fails: {(proc.stderr.strip().splitlines() or [f'exit {proc.returncode}'])[-1]}"
        else:
            row.update(libraries=found.get("libraries", []), majors=found.get("majors", []))
            trouble = found.get("skipped") or found.get("device_failed")
            if trouble:
                row["verdict"] = f"no step on the GPU: {trouble}"
            elif len(row["majors"]) > 1:
                row["verdict"] = f"mixes CUDA {' and '.join(map(str, row['majors']))} in one process"
            elif not row["libraries"]:
                row["verdict"] = "no CUDA library mapped after a step on cuda"
            else:
                row["verdict"] = "ok"
        rows.append(row)
    return rows


def render_maps(rows: list[dict]) -> str:
    lines = ["CUDA libraries each framework's worker mapped after one step on cuda:"]
    for r in rows:
        lines.append(f"  {r['framework']} ({r['adapter']}, {r['python']}): {r['verdict']}")
        for lib in r["libraries"]:
            lines.append(f"    CUDA {lib['cuda'] or '?'}  {lib['path']}  ({lib['owner'] or 'not pip-installed'})")
    return "\n".join(lines)

"""Kernel JIT before timing. A framework build whose kernels hold no machine code (SASS) for this
GPU, only PTX, has the driver compile them at first use: TensorFlow 2.21's wheel carries
sm_60-sm_89 and compute_90 PTX, so on an H100 or H200 (sm_90) its first process compiles for
minutes (TensorFlow warns it "could take 30 minutes or longer"). Left to the first timed cell, the
compile lands in its cold window and can outrun a worker's timeout.

``needed`` reads a build's kernel architectures (``build_info()["kernel_archs"]``) against the GPU.
A build is an interpreter and the kernel library its adapters' steps run (``build_of``: keras-tf's
is TensorFlow, in TensorFlow's environment), not a framework name: keras-tf, tf-eager and
tf-function share one, keras-jax another. ``plan`` then gives, per build that needs a JIT, one
untimed step of each of the run's workloads per kind of adapter on it, and ``warm_up`` runs them
under a long timeout, before any cell. The driver's compute cache (harness.processes.compute_cache_env,
the same in every process the harness starts) holds the result for the timed cells. ``driver_floor``
is the oldest driver that can JIT a CUDA toolkit's PTX.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from adapters import AdapterInfo
from harness.records import Cell, base_adapter

#: The longest a warm-up may compile, per kind of adapter on a build (TensorFlow: "30 minutes or longer").
WARM_UP_TIMEOUT_S = 3600
#: Seconds between the progress lines a long warm-up prints.
HEARTBEAT_S = 60

#: The oldest Linux driver of each CUDA toolkit (its release notes' table 3): PTX a toolkit emits
#: carries its PTX ISA version, which an older driver cannot JIT. Newer minors: the newest row below it.
DRIVER_FLOORS = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


def parse_arch(text: str) -> tuple[str, tuple[int, int], str] | None:
    """("sm" or "compute", (major, minor), suffix) of "sm_90", "compute_90", "sm_90a"; None otherwise."""
    m = _ARCH.match(text.strip())
    return (m[1], (int(m[2]), int(m[3])), m[4]) if m else None


def _name(kind: str, cap: tuple[int, int], suffix: str = "") -> str:
    return f"{kind}_{cap[0]}{cap[1]}{suffix}"


def needed(archs: list[str], capability: tuple[int, int]) -> dict[str, Any] | None:
    """What the driver must compile for a GPU of ``capability``, given a build's ``archs``: None
    when SASS runs there (same major, minor at most the GPU's; an "a"/"f" build on its own
    capability only), or when ``archs`` is empty (the build does not say). Else {"gpu": "sm_90",
    "sass_newest": "sm_89" or None, "ptx": "compute_90"}, "ptx" None when nothing can run there."""
    parsed = [p for p in map(parse_arch, archs) if p]
    if not parsed:
        return None
    for kind, cap, suffix in parsed:
        if kind == "sm" and cap[0] == capability[0] and cap[1] <= capability[1] and (not suffix or cap == capability):
            return None
    sass = sorted(cap for kind, cap, _ in parsed if kind == "sm")
    ptx = sorted(cap for kind, cap, suffix in parsed if kind == "compute" and not suffix and cap <= capability)
    return {
        "gpu": _name("sm", capability),
        "sass_newest": _name("sm", sass[-1]) if sass else None,
        "ptx": _name("compute", ptx[-1]) if ptx else None,
    }


def driver_floor(cuda_version: str | None) -> str | None:
    """The oldest driver that JITs PTX from CUDA ``cuda_version`` ("12.5.1"); None if unknown."""
    try:
        major, minor = (int(x) for x in str(cuda_version).split(".")[:2])
    except ValueError:
        return None
    known = [k for k in DRIVER_FLOORS if k[0] == major and k <= (major, minor)]
    return DRIVER_FLOORS[max(known)] if known else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def problem(need: dict[str, Any], cuda_version: str | None, driver: str | None) -> str | None:
    """Why the driver cannot run a build that ``need``s a JIT; None when it can."""
    gpu = need["gpu"]
    if need["ptx"] is None:
        newest = need["sass_newest"] or "none"
        return f"the build has no machine code or PTX that runs on {gpu} (newest SASS {newest}): use a newer build"
    floor = driver_floor(cuda_version)
    if floor and driver and _version(driver) < _version(floor):
        return (
            f"driver {driver} cannot JIT the build's CUDA {cuda_version} PTX ({need['ptx']}) for {gpu}: "
            f"update the driver to {floor} or newer"
        )
    return None


def summary(need: dict[str, Any]) -> str:
    """One phrase: what the build lacks and what the driver compiles instead."""
    newest = f" (newest {need['sass_newest']})" if need["sass_newest"] else ""
    return f"no machine code for {need['gpu']}{newest}: the driver JIT-compiles its {need['ptx']} PTX"


#: The libraries whose GPU kernels an adapter's steps run, by module name: an adapter runs the first
#: of these it requires (keras-tf requires keras and tensorflow: TensorFlow's kernels).
KERNEL_LIBRARIES = ("tensorflow", "torch", "jax")


def kernel_library(info: AdapterInfo) -> str:
    """The library whose kernels ``info``'s steps run: the first of KERNEL_LIBRARIES it requires
    (keras-tf: tensorflow, flax-nnx: jax), else its environment's family (a plugin's own)."""
    return next((m for m in KERNEL_LIBRARIES if m in info.cls.requires), info.environment)


def build_of(info: AdapterInfo, cell: Mapping[str, Any]) -> tuple[str, str]:
    """The build a cell of ``info`` runs: (its worker's interpreter, ``kernel_library``). Cells
    with one build run the same kernels, compiled into one compute cache."""
    from harness.running import runner

    return runner.interpreter(info, cell), kernel_library(info)


class DoctorRow(TypedDict, total=False):
    """The fields of a doctor's row (harness.checks.doctor.diagnose) that ``needs_of`` reads."""

    adapter: str  # "keras-tf", or "torch-eager@torch-next" for a named environment's
    python: str | None
    next_step: str
    kernel_jit: dict[str, Any] | None  # ``needed``'s answer for this GPU


class Need(TypedDict):
    """One build's JIT, as ``needs_of`` gives it: the interpreter its doctor row ran under (None:
    the adapter's own) and ``needed``'s answer."""

    python: str | None
    need: dict[str, Any]


def needs_of(rows: Sequence[DoctorRow]) -> dict[str, Need]:
    """What the driver must JIT, from the doctor's rows: row adapter -> ``Need``, for the builds
    that ship PTX alone for this GPU and that the driver can compile."""
    return {
        r["adapter"]: {"python": r.get("python"), "need": r["kernel_jit"] or {}}
        for r in rows
        if (r.get("kernel_jit") or {}).get("ptx") and r["next_step"].startswith("ok")
    }


def plan(adapters: Mapping[str, AdapterInfo], cells: Sequence[Cell], needs: Mapping[str, Need]) -> list[dict[str, Any]]:
    """The warm-ups to run, in the order of ``cells``: for each build (``build_of``) that a row of
    ``needs`` (``needs_of``) names, one per kind of adapter among its cells (framework and
    requirements, the doctor's rows: tf-eager and tf-function are one, keras-tf another), each
    {"framework", "adapter" (its first cell's), "build": {"python", "library"}, "need",
    "cells": one per workload (overrides and precision included), "workloads"}. Whatever the
    framework selection: a run of keras-tf alone warms TensorFlow's build through keras-tf."""
    builds: dict[tuple[str, str], dict[str, Any]] = {}
    for label, found in needs.items():
        info = adapters.get(label.split("@")[0])
        if info is not None:
            python = found.get("python") or build_of(info, {})[0]
            builds.setdefault((python, kernel_library(info)), found["need"])
    kinds: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        info = adapters[base_adapter(c)]
        build = build_of(info, c)
        if build in builds:
            kinds.setdefault((build, info.framework, info.cls.requires), []).append(c)
    planned = []
    for (build, _, _), own in kinds.items():
        shapes = dict.fromkeys((c["workload"], tuple(c.get("overrides", ())), c.get("precision", "fp32")) for c in own)
        first: dict[str, Any] = {k: own[0][k] for k in ("adapter", "framework", "graph", "device_requested", "threads")}
        named: dict[str, Any] = {k: own[0][k] for k in ("base_adapter", "python") if own[0].get(k)}  # --env's
        first |= named
        warm = [
            first | {"run_id": "warm-up", "workload": w, "overrides": list(o), "precision": p, "profile": "quick"}
            for w, o, p in shapes
        ]
        planned.append(
            {
                "framework": own[0]["framework"],
                "adapter": own[0]["adapter"],
                "build": {"python": build[0], "library": build[1]},
                "need": builds[build],
                "cells": warm,
                "workloads": [" ".join([w, *o] + ([p] if p != "fp32" else [])) for w, o, p in shapes],
            }
        )
    return planned


def warm_up(
    adapters: Mapping[str, AdapterInfo],
    cells: Sequence[Cell],
    needs: Mapping[str, Need],
    timeout_s: float = WARM_UP_TIMEOUT_S,
) -> list[dict[str, Any]]:
    """Run ``plan``'s warm-ups, one worker each, on its cells' device: one untimed training step of
    each workload. One record each: framework, adapter, build, the need's fields, what, workloads,
    seconds (process start included), status ("ok" or "failed") and reason. A failure is
    recorded; the run goes on."""
    from harness.running import runner

    done = []
    for planned in plan(adapters, cells, needs):
        need, label = planned["need"], f"{planned['adapter']} ({planned['build']['library']})"
        info = adapters[base_adapter(planned["cells"][0])]
        print(f"{label}: {summary(need)}, once, before timing ({', '.join(planned['workloads'])}) ...", flush=True)
        found = {k: planned[k] for k in ("framework", "adapter", "build")}
        found |= {**need, "what": summary(need), "workloads": planned["workloads"]}
        stop, start = threading.Event(), time.perf_counter()
        beat = threading.Thread(target=_heartbeat, args=(label, stop, start), daemon=True)
        beat.start()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                batch = {"cells": planned["cells"]}
                proc = runner.run_worker(info, batch, "check", Path(tmp), timeout_s, ["--steps", "1"])
            ok = proc.returncode == 0
            reason = None if ok else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            ok, reason = False, f"no end within {timeout_s:g} s"
        finally:
            stop.set()
        seconds = time.perf_counter() - start
        found |= {"seconds": round(seconds, 1), "status": "ok" if ok else "failed", "reason": reason}
        print(f"{label}: kernel JIT warm-up {found['status']} in {seconds:.0f} s", flush=True)
        done.append(found)
    return done


def _heartbeat(label: str, stop: threading.Event, start: float) -> None:
    while not stop.wait(HEARTBEAT_S):
        print(f"{label}: still compiling, {time.perf_counter() - start:.0f} s so far ...", flush=True)

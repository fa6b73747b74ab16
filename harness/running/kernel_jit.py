"""Kernel JIT before timing. A framework build whose kernels hold no machine code (SASS) for this
GPU, only PTX, has the driver compile them at first use: TensorFlow 2.21's wheel carries
sm_60-sm_89 and compute_90 PTX, so on an H100 or H200 (sm_90) its first process compiles for
minutes (TensorFlow warns it "could take 30 minutes or longer"). Left to the first timed cell, the
compile lands in its cold window and can outrun a worker's timeout.

``needed`` reads a build's kernel architectures (``build_info()["kernel_archs"]``) against the GPU.
``warm_up`` then takes one untimed step of each of the run's workloads per such framework, under
a long timeout, before any cell. The driver's compute cache (``CUDA_CACHE_PATH``, 4 GiB, kept
between processes: harness.running.runner) holds the result for the timed cells. ``driver_floor``
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
from typing import Any

from adapters import AdapterInfo
from harness.records import Cell

#: The longest a warm-up may compile, per framework (TensorFlow: "30 minutes or longer").
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


def needs_of(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """framework -> what its driver must JIT, from the doctor's rows (harness.checks.doctor): the
    builds that ship PTX alone for this GPU and that the driver can compile."""
    return {
        r["framework"]: r["kernel_jit"]
        for r in rows
        if (r.get("kernel_jit") or {}).get("ptx") and r["next_step"].startswith("ok")
    }


def warm_up(
    adapters: Mapping[str, AdapterInfo],
    cells: Sequence[Cell],
    needs: Mapping[str, dict[str, Any]],
    timeout_s: float = WARM_UP_TIMEOUT_S,
) -> list[dict[str, Any]]:
    """For each framework in ``needs`` (framework -> ``needed``'s answer) with cells in ``cells``:
    one untimed training step of each of its workloads, in one worker of its first adapter, on that
    adapter's device. One record each: framework, adapter, workloads, seconds (process start
    included), status ("ok" or "failed") and reason. A failure is recorded; the run goes on."""
    from harness.running import runner

    done = []
    for framework, need in needs.items():
        own = [c for c in cells if c["framework"] == framework]
        if not own:
            continue
        info = adapters[own[0]["adapter"]]
        kinds = dict.fromkeys((c["workload"], tuple(c.get("overrides", ())), c.get("precision", "fp32")) for c in own)
        first = {k: own[0][k] for k in ("adapter", "framework", "graph", "device_requested", "threads")}
        batch = {
            "cells": [
                first | {"run_id": "warm-up", "workload": w, "overrides": list(o), "precision": p, "profile": "quick"}
                for w, o, p in kinds
            ]
        }
        workloads = [" ".join([w, *o] + ([p] if p != "fp32" else [])) for w, o, p in kinds]
        print(f"{framework}: {summary(need)}, once, before timing ({', '.join(workloads)}) ...", flush=True)
        found = {"framework": framework, "adapter": info.name, **need, "what": summary(need), "workloads": workloads}
        stop, start = threading.Event(), time.perf_counter()
        beat = threading.Thread(target=_heartbeat, args=(framework, stop, start), daemon=True)
        beat.start()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                proc = runner.run_worker(info, batch, "check", Path(tmp), timeout_s, ["--steps", "1"])
            ok = proc.returncode == 0
            reason = None if ok else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            ok, reason = False, f"no end within {timeout_s:g} s"
        finally:
            stop.set()
        seconds = time.perf_counter() - start
        found |= {"seconds": round(seconds, 1), "status": "ok" if ok else "failed", "reason": reason}
        print(f"{framework}: kernel JIT warm-up {found['status']} in {seconds:.0f} s", flush=True)
        done.append(found)
    return done


def _heartbeat(framework: str, stop: threading.Event, start: float) -> None:
    while not stop.wait(HEARTBEAT_S):
        print(f"{framework}: still compiling, {time.perf_counter() - start:.0f} s so far ...", flush=True)

"""The run's environment, captured in the parent without importing any framework."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

PACKAGES = ("numpy", "torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "optax", "pandas")


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi reports them; empty when there is none."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not out:
        return []
    rows = [line.split(", ") for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": r[2]} for r in rows if len(r) == 3]


@functools.cache
def fingerprint() -> dict[str, Any]:
    """The hardware a timing depends on, of the machine this process runs on: CPU model, logical
    cores, GPU models (all of the node's, whatever CUDA_VISIBLE_DEVICES says) and NVIDIA driver.
    Records with equal fingerprints ran on comparable machines; the host name is not part of it,
    so the identical nodes of a cluster compare with each other."""
    found = gpus()
    return {
        "cpu": cpu_model(),
        "cores": psutil.cpu_count(logical=True),
        "gpus": [g["name"] for g in found],
        "driver": found[0]["driver"] if found else None,
    }


def package_versions(modules: Iterable[str] = ()) -> dict[str, str]:
    """Versions of PACKAGES and of the distributions that provide ``modules`` (every adapter's
    ``requires``, so a plugin's framework is listed too), by distribution name; what is not
    installed is left out."""
    provided = importlib.metadata.packages_distributions()
    names = list(PACKAGES) + [dist for m in modules for dist in provided.get(m.split(".")[0], [])]
    versions: dict[str, str] = {}
    seen: set[str] = set()
    for name in names:
        key = re.sub(r"[-_.]+", "-", name).lower()  # tensorflow_cpu and tensorflow-cpu are one
        if key in seen:
            continue
        seen.add(key)
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def capture(threads: int, argv: list[str], modules: Iterable[str] = ()) -> dict[str, Any]:
    """The run's environment; ``modules`` are the adapters' ``requires``, whose packages'
    versions go into ``packages``."""
    repo = Path(__file__).resolve().parent.parent
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpus(),
        "fingerprint": fingerprint(),
        "threads": threads,
        "packages": package_versions(modules),
        "git_sha": _run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(_run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])),
        "command": " ".join(argv),
    }


def default_threads() -> int:
    """All cores given to this process (its CPU affinity), the same for every framework."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1

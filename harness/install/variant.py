"""Which install variant fits this machine: ``cpu``, ``cuda12`` or ``cuda13``.

Runs before any environment exists (``python3 -m harness.install.variant``, called by the Makefile), so
it uses the standard library only. The choice reads ``nvidia-smi``: no NVIDIA driver means
``cpu``; a driver new enough for CUDA 13 builds means ``cuda13``; one new enough for CUDA 12
builds (minor-version compatibility) means ``cuda12``; an older one means ``cpu``, with the
reason. Each variant's pinned packages are ``locks/<variant>.txt`` (``make lock`` re-resolves).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VARIANTS = ("cpu", "cuda12", "cuda13")


@dataclass(frozen=True)
class Environment:
    """One Python environment of a variant: its folder, its lock (``locks/<lock>.txt``), the
    framework families whose workers run in it (empty: every family no other environment
    claims) and the one CUDA major its libraries belong to (None: CPU builds)."""

    name: str
    folder: str
    lock: str
    frameworks: tuple[str, ...] = ()
    cuda: int | None = None


# One CUDA major per environment: TensorFlow 2.21's CUDA libraries are CUDA 12 (nvidia-*-cu12),
# and cu12 and cu13 wheels install the same paths (nvidia/cudnn/lib/libcudnn*.so.9), so on the
# GPU variants TensorFlow gets its own environment. Each environment is resolved as a whole.
TF_ENV = Environment("tf", ".venv-tf", "tf-cuda12", ("tensorflow",), 12)
ENVIRONMENTS: dict[str, tuple[Environment, ...]] = {
    "cpu": (Environment("main", ".venv", "cpu"),),
    "cuda12": (Environment("main", ".venv", "cuda12", cuda=12), TF_ENV),
    "cuda13": (Environment("main", ".venv", "cuda13", cuda=13), TF_ENV),
}
LOCK_NAMES = tuple(dict.fromkeys(e.lock for envs in ENVIRONMENTS.values() for e in envs))
# Minimum Linux driver versions for the CUDA runtimes the GPU wheels bundle (NVIDIA's CUDA
# compatibility table: 13.x needs >= 580, 12.x runs on >= 525 through minor-version compatibility).
MIN_DRIVER = {"cuda13": (580, 0), "cuda12": (525, 60)}
INSTALL_HINT = "make bench VARIANT={variant}  (or: make install VARIANT={variant})"


@dataclass(frozen=True)
class Choice:
    variant: str
    reason: str
    driver: str | None = None


def parse_driver(text: str) -> tuple[int, ...] | None:
    """``"580.65.06"`` -> (580, 65, 6); None when the text is not a version."""
    try:
        return tuple(int(part) for part in text.strip().split("."))
    except ValueError:
        return None


def query_driver() -> tuple[str | None, str | None]:
    """(driver version, problem): the first GPU's driver as nvidia-smi reports it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "no nvidia-smi on PATH (no NVIDIA driver)"
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi failed: {exc}"
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        detail = (out.stderr or out.stdout).strip().splitlines()
        return None, f"nvidia-smi exited {out.returncode}: {detail[-1] if detail else 'no GPU listed'}"
    return lines[0], None


def choose(driver: str | None, problem: str | None = None) -> Choice:
    """The variant for a driver version (None: no usable driver, ``problem`` says why)."""
    if driver is None:
        return Choice("cpu", problem or "no NVIDIA driver")
    version = parse_driver(driver)
    if version is None:
        return Choice("cpu", f"unreadable driver version {driver!r}", driver)
    for variant in ("cuda13", "cuda12"):
        need = MIN_DRIVER[variant]
        if version >= need:
            return Choice(variant, f"NVIDIA driver {driver} (>= {'.'.join(map(str, need))})", driver)
    oldest = ".".join(map(str, MIN_DRIVER["cuda12"]))
    return Choice("cpu", f"NVIDIA driver {driver} is older than {oldest}, the oldest CUDA 12 builds run on", driver)


def detect() -> Choice:
    return choose(*query_driver())


def installed() -> str | None:
    """The variant ``make install`` put into this environment; None outside one."""
    marker = Path(sys.prefix) / "dlcompare-variant"
    return marker.read_text().strip() if marker.is_file() else None


def lock_names(given: list[str]) -> list[str]:
    """The locks a command names (every lock where it names none); ValueError naming the first
    unknown one and the valid ones."""
    bad = [n for n in given if n not in LOCK_NAMES]
    if bad:
        raise ValueError(f"unknown lock {bad[0]!r}; valid: {', '.join(LOCK_NAMES)}")
    return list(given) or list(LOCK_NAMES)


def lock_environment(lock: str) -> Environment:
    """The environment a lock file installs (the first variant's, where several share it)."""
    for envs in ENVIRONMENTS.values():
        for environment in envs:
            if environment.lock == lock:
                return environment
    raise ValueError(f"no environment installs locks/{lock}.txt; locks: {', '.join(LOCK_NAMES)}")


def main(argv: list[str]) -> int:
    """``choose``: print the variant on stdout and why on stderr (what the Makefile shows).
    ``extra VARIANT``: the variant's environments beside .venv, one ``NAME:LOCK`` per line (the
    Makefile makes ``$(VENV)-NAME`` from ``locks/LOCK.txt``)."""
    if argv[:1] == ["extra"] and len(argv) == 2 and argv[1] in ENVIRONMENTS:
        for environment in ENVIRONMENTS[argv[1]][1:]:
            print(f"{environment.name}:{environment.lock}")
        return 0
    if argv[:1] != ["choose"]:
        print("usage: python3 -m harness.install.variant choose | extra VARIANT", file=sys.stderr)
        return 2
    choice = detect()
    print(choice.variant)
    print(f"install variant: {choice.variant} ({choice.reason}); override with VARIANT=...", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

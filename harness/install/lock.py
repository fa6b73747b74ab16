"""Re-resolve the install variants' lock files: ``python -m harness.install.lock [VARIANT ...]`` (``make lock``).

For each variant, pip's resolver reads ``locks/<variant>.in`` with ``--dry-run --report`` (package
metadata only: nothing is installed, no GPU is needed) and ``locks/<variant>.txt`` gets every
package it would install, pinned. pip runs with this machine's own configuration (indexes,
find-links), as any install here does.

Two rules keep a lock portable:
- A wheel that came from a local folder (find-links) is this machine's choice of build: its pin
  drops the local label (``torch==2.13.0``, not ``2.13.0+cpu``), so elsewhere the index decides.
- Where a variant's extra index (PyTorch's CUDA 12 wheels) cannot be reached, the packages it
  serves are resolved as the registry's build of the same version (same dependencies but the
  CUDA libraries); the lock keeps their ``.in`` lines, leaves the CUDA library packages
  (``nvidia-*``, ``cuda-*``) to install time, and says so in its header (``PARTIAL``).
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from harness.install.variant import VARIANTS

LOCKS = Path(__file__).resolve().parents[2] / "locks"
PROJECT = "dlcompare"
INDEX_OPTION = re.compile(r"^--(extra-)?index-url\s+(\S+)")
# Packages a variant takes from its extra index; the CUDA library packages their builds pin.
INDEX_SERVED = {"cuda12": ("torch",)}
CUDA_LIBRARIES = ("nvidia-", "cuda-")


def requirement_name(line: str) -> str:
    """The package a requirement line names, normalised (``tensorflow_cpu`` -> ``tensorflow-cpu``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[=<>!~;]", line.strip(), maxsplit=1)[0]).lower()


def registry_build(line: str) -> str:
    """``torch==2.13.0+cu128`` -> ``torch==2.13.0``: the same version as the registry builds it."""
    return re.sub(r"\+[\w.]+", "", line)


def reachable(url: str, timeout_s: float = 15) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def resolve(lines: list[str], cwd: Path) -> list[dict]:
    """pip's resolution of requirement lines: the report's ``install`` entries. Raises
    RuntimeError with pip's last lines when it cannot resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        req, report = Path(tmp) / "req.in", Path(tmp) / "report.json"
        req.write_text("\n".join(lines) + "\n")
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        cmd += ["--report", str(report), "-r", str(req)]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "is ignored" not in ln]
            raise RuntimeError("\n".join(errors[-8:]))
        return json.loads(report.read_text())["install"]


def pin(entry: dict) -> str:
    name, version = entry["metadata"]["name"], entry["metadata"]["version"]
    if entry["download_info"]["url"].startswith("file:"):
        version = version.split("+", 1)[0]
    return f"{name}=={version}"


def lock_text(variant: str, inputs: list[str], pins: list[str], partial: str | None) -> str:
    pip_version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    head = [
        f"# dlcompare install variant {variant!r}: every package `make install VARIANT={variant}` installs, pinned.",
        f"# Generated from locks/{variant}.in by `make lock` on {datetime.date.today()},",
        f"# pip {pip_version}, CPython {platform.python_version()}, {sys.platform} {platform.machine()}:",
        "#   pip install --dry-run --ignore-installed --report REPORT -r locks/" + variant + ".in",
    ]
    if partial:
        head.append(f"# PARTIAL: {partial}")
    options = [ln for ln in inputs if INDEX_OPTION.match(ln)]
    return "\n".join(head + options + sorted(pins, key=str.lower)) + "\n"


def lock(variant: str) -> str:
    """Resolve one variant and write its lock file; returns a one-line account."""
    source = LOCKS / f"{variant}.in"
    inputs = [ln.strip() for ln in source.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    partial = None
    lines = inputs
    served = INDEX_SERVED.get(variant, ())
    unreachable = [m.group(2) for ln in inputs if (m := INDEX_OPTION.match(ln)) and not reachable(m.group(2))]
    if unreachable and served:
        lines = [registry_build(ln) if requirement_name(ln) in served else ln for ln in inputs]
        lines = [ln for ln in lines if not INDEX_OPTION.match(ln)]
        partial = (
            f"{', '.join(unreachable)} was unreachable when this was resolved: {', '.join(served)} keep their "
            f".in pins, their other dependencies are those of the registry's build of the same version, and "
            f"the CUDA libraries ({', '.join(f + '*' for f in CUDA_LIBRARIES)}) are chosen at install. "
            "Re-run `make lock` where that index is reachable for a full lock."
        )
    installs = resolve(lines, LOCKS.parent)
    pins = [pin(e) for e in installs if e["metadata"]["name"].lower() != PROJECT]
    if partial:
        pins = [p for p in pins if not p.lower().startswith(CUDA_LIBRARIES) and requirement_name(p) not in served]
        pins += [ln for ln in inputs if requirement_name(ln) in served]
    (LOCKS / f"{variant}.txt").write_text(lock_text(variant, inputs, pins, partial))
    note = f" (partial: {', '.join(unreachable)} unreachable)" if partial else ""
    return f"{variant}: {len(pins)} packages{note}"


def main(argv: list[str]) -> int:
    variants = argv or list(VARIANTS)
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        print(f"error: unknown variant {bad[0]!r}; valid: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    failed = 0
    for variant in variants:
        print(f"resolving {variant} ...", flush=True)
        try:
            print(f"  {lock(variant)} -> locks/{variant}.txt", flush=True)
        except RuntimeError as exc:
            failed += 1
            print(f"  {variant}: pip could not resolve it; locks/{variant}.txt is unchanged:\n{exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Resolve and check the environments' lock files: ``python -m harness.install.lock [LOCK ...]``
(``make lock``) and ``python -m harness.install.lock --check [LOCK ...]`` (``make lock-check``).

Each lock is ``locks/<name>.txt`` (what ``make install`` installs into one environment, pinned),
resolved from ``locks/<name>.in`` by pip's resolver (``--dry-run --report``: package metadata
only, nothing installed, no GPU needed), and ``locks/<name>.meta.json``: what each pinned wheel
requires (its ``Requires-Dist``), its file and size, and the marker environment it was resolved
for, so the lock's consistency is checked offline (``check``, run by the test suite).

Where pip looks:
- The GPU locks are resolved from the registry alone (``PIP_CONFIG_FILE=/dev/null pip --isolated
  --index-url https://pypi.org/simple``, plus an index the ``.in`` names): this machine's pip configuration
  offers a local ``torch-2.13.0+cpu`` wheel without CUDA dependencies, which must not decide a
  CUDA lock.
- The ``cpu`` lock is resolved with this machine's configuration, as its install here is (the
  local CPU build of torch is the point of it); its pin drops the local label
  (``torch==2.13.0``), so elsewhere the registry's build of that version installs.
- Where a lock's extra index (PyTorch's CUDA 12 wheels) cannot be reached, the packages it serves
  keep their ``.in`` pins and the CUDA libraries (``nvidia-*``, ``cuda-*``, triton) are left to
  install time; the header says so (``PARTIAL``) and the check allows just those.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.install.variant import lock_environment, lock_names

LOCKS = Path(__file__).resolve().parents[2] / "locks"
PROJECT = "dlcompare"
REGISTRY = "https://pypi.org/simple"
# Locks resolved with this machine's pip configuration (its find-links, indexes, constraints).
MACHINE_CONFIG = ("cpu",)
INDEX_OPTION = re.compile(r"^--(extra-)?index-url\s+(\S+)")
# Packages a lock takes from its extra index; the CUDA library packages their builds pin.
INDEX_SERVED = {"cuda12": ("torch",)}
CUDA_LIBRARIES = ("nvidia-", "cuda-", "triton")
KEPT_LIBRARIES = ("nvidia-ml-py",)  # NVML bindings: the harness's own dependency, not a CUDA library
CUDA_SUFFIX = re.compile(r"-cu(\d+)$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    """The package a requirement line names, normalised (``tensorflow_cpu`` -> ``tensorflow-cpu``)."""
    return normalise(re.split(r"[\s\[=<>!~;]", line.strip(), maxsplit=1)[0])


def registry_build(line: str) -> str:
    """``torch==2.13.0+cu128`` -> ``torch==2.13.0``: the same version as the registry builds it."""
    return re.sub(r"\+[\w.]+", "", line)


def reachable(url: str, timeout_s: float = 15) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def pip_command(name: str) -> list[str]:
    """pip's dry-run install for a lock: the registry alone (with ``pip_env``), or this machine's
    configuration."""
    if name in MACHINE_CONFIG:
        return [sys.executable, "-m", "pip", "install"]
    return [sys.executable, "-m", "pip", "--isolated", "install", "--index-url", REGISTRY]


def pip_env(name: str) -> dict[str, str] | None:
    """The environment pip runs in for a lock: for the registry alone, no configuration file at
    all (``--isolated`` skips the environment's and the user's configuration, where this project's
    machines offer the local CPU torch, but still reads the global files: another machine may
    offer it there; here they cap torch's version); None: this process's."""
    return None if name in MACHINE_CONFIG else {**os.environ, "PIP_CONFIG_FILE": os.devnull}


def resolve(name: str, lines: list[str], cwd: Path) -> dict[str, Any]:
    """pip's report for requirement lines, resolved as lock ``name`` is. Raises RuntimeError
    with pip's last lines when it cannot resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        req, report = Path(tmp) / "req.in", Path(tmp) / "report.json"
        req.write_text("\n".join(lines) + "\n")
        cmd = [*pip_command(name), "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        proc = subprocess.run([*cmd, "-r", str(req)], cwd=cwd, env=pip_env(name), capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "is ignored" not in ln]
            raise RuntimeError("\n".join(errors[-12:]))
        return json.loads(report.read_text())


def pin(entry: dict) -> str:
    name, version = entry["metadata"]["name"], entry["metadata"]["version"]
    if entry["download_info"]["url"].startswith("file:"):
        version = version.split("+", 1)[0]
    return f"{name}=={version}"


def inputs_of(name: str, locks: Path = LOCKS) -> list[str]:
    source = locks / f"{name}.in"
    return [ln.strip() for ln in source.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def pins_of(name: str, locks: Path = LOCKS) -> dict[str, str]:
    """The lock file's pins: {normalised name: version}."""
    lines = (locks / f"{name}.txt").read_text().splitlines()
    return {requirement_name(ln): ln.split("==", 1)[1] for ln in lines if "==" in ln and not ln.startswith("#")}


def file_size(url: str, name: str, version: str) -> int | None:
    """The wheel's size in bytes: a local file's, or the registry's (its simple index in JSON,
    PEP 691/700); None if unknown."""
    if url.startswith("file:"):
        path = Path(urllib.request.url2pathname(url[5:]))
        return path.stat().st_size if path.is_file() else None
    filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
    request = urllib.request.Request(
        f"{REGISTRY}/{normalise(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            files = json.load(resp)["files"]
    except (OSError, ValueError, KeyError):
        return None
    return next((f.get("size") for f in files if f["filename"] == filename), None)


def metadata(name: str, report: dict[str, Any], partial: dict[str, Any] | None) -> dict[str, Any]:
    """What ``check`` needs from pip's report: each package's requirements, file and size."""
    entries = report["install"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = list(
            pool.map(
                lambda e: file_size(e["download_info"]["url"], e["metadata"]["name"], e["metadata"]["version"]),
                entries,
            )
        )
    packages = {}
    for entry, size in zip(entries, sizes, strict=True):
        meta = entry["metadata"]
        packages[normalise(meta["name"])] = {
            "version": meta["version"],
            "requires_dist": meta.get("requires_dist", []),
            "file": entry["download_info"]["url"].rsplit("/", 1)[-1].split("#", 1)[0],
            "local": entry["download_info"]["url"].startswith("file:"),
            "size": size,
        }
    return {
        "lock": name,
        "resolved_from": "this machine's pip configuration" if name in MACHINE_CONFIG else f"{REGISTRY} only",
        "marker_environment": report["environment"],
        "partial": partial,
        "packages": dict(sorted(packages.items())),
    }


def lock_text(name: str, inputs: list[str], pins: list[str], partial: str | None) -> str:
    pip_version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    environment = lock_environment(name)
    where = "this machine's pip configuration" if name in MACHINE_CONFIG else f"{REGISTRY} alone (pip --isolated)"
    head = [
        f"# dlcompare lock {name!r}: every package `make install` puts into {environment.folder}, pinned.",
        f"# Generated from locks/{name}.in by `make lock` on {datetime.date.today()},",
        f"# pip {pip_version}, CPython {platform.python_version()}, {sys.platform} {platform.machine()},",
        f"# resolved from {where}; what each pin requires: locks/{name}.meta.json (`make lock-check`).",
    ]
    if partial:
        head.append(f"# PARTIAL: {partial}")
    options = [ln for ln in inputs if INDEX_OPTION.match(ln)]
    return "\n".join(head + options + sorted(pins, key=str.lower)) + "\n"


def lock(name: str) -> str:
    """Resolve one lock and write its ``.txt`` and ``.meta.json``; returns a one-line account."""
    inputs = inputs_of(name)
    partial, left = None, []
    lines = inputs
    served = INDEX_SERVED.get(name, ())
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
    report = resolve(name, lines, LOCKS.parent)
    installs = [e for e in report["install"] if normalise(e["metadata"]["name"]) != PROJECT]
    pins = [pin(e) for e in installs]
    if partial:
        left = sorted(
            requirement_name(p)
            for p in pins
            if requirement_name(p).startswith(CUDA_LIBRARIES) and requirement_name(p) not in KEPT_LIBRARIES
        )
        pins = [p for p in pins if requirement_name(p) not in left and requirement_name(p) not in served]
        pins += [ln for ln in inputs if requirement_name(ln) in served]
        # The served packages keep the registry build's metadata: their other requirements are checked.
        report["install"] = [e for e in report["install"] if normalise(e["metadata"]["name"]) not in left]
    (LOCKS / f"{name}.txt").write_text(lock_text(name, inputs, pins, partial))
    meta = metadata(name, report, {"served": list(served), "left_to_install": left} if partial else None)
    (LOCKS / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    note = f" (partial: {', '.join(unreachable)} unreachable)" if partial else ""
    return f"{name}: {len(pins)} packages{note}"


def _roots(inputs: list[str]) -> list[tuple[str, set[str], str]]:
    """(name, extras, specifier) of each requirement an ``.in`` file names; ``-e .[x]`` is the project."""
    from packaging.requirements import Requirement

    roots = []
    for line in inputs:
        if INDEX_OPTION.match(line):
            continue
        if line.startswith("-e "):
            extras = re.search(r"\[([^\]]*)\]", line)
            roots.append((PROJECT, set(extras.group(1).split(",")) if extras else set(), ""))
            continue
        req = Requirement(line)
        roots.append((normalise(req.name), set(req.extras), str(req.specifier)))
    return roots


def check(name: str, locks: Path = LOCKS) -> list[str]:
    """What is wrong with lock ``name`` by its stored metadata ([] when nothing): every package a
    pinned wheel (or the project, or the ``.in``) requires, under the markers of the
    environment it was resolved for and the extras in force, is pinned at a version the
    requirement accepts; nothing is pinned that nothing requires; no local wheel in a GPU lock;
    no CUDA library of another CUDA major than the environment's."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    meta_file = locks / f"{name}.meta.json"
    if not meta_file.is_file():
        return [f"locks/{name}.meta.json is missing: run `make lock`"]
    meta = json.loads(meta_file.read_text())
    packages, pins, problems = meta["packages"], pins_of(name, locks), []
    partial = meta.get("partial") or {}
    unchecked = set(partial.get("left_to_install", []))
    for dist, version in pins.items():
        stored = packages.get(dist)
        if stored is None:
            problems.append(f"{dist}=={version} is pinned but has no stored metadata")
        elif stored["version"].split("+")[0] != version.split("+")[0]:
            problems.append(f"{dist}=={version} is pinned but its stored metadata is of {stored['version']}")
    extras: dict[str, set[str]] = {}
    todo = []
    for dist, wanted, spec in _roots(inputs_of(name, locks)):
        extras.setdefault(dist, set()).update(wanted)
        todo.append(dist)
        if dist != PROJECT and not _accepts(spec, pins.get(dist)):
            problems.append(f"locks/{name}.in asks for {dist}{spec}, the lock pins {pins.get(dist)}")
    seen: dict[str, set[str]] = {}
    while todo:  # the requirements in force, to a fixed point of (package, extras)
        dist = todo.pop()
        if dist in unchecked or seen.get(dist) == extras[dist]:
            continue
        seen[dist] = set(extras[dist])
        for text in packages.get(dist, {}).get("requires_dist") or []:
            req = Requirement(text)
            env = meta["marker_environment"]
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in [""] + sorted(seen[dist])):
                continue
            dep = normalise(req.name)
            if dep in unchecked:
                continue
            if dep not in pins and dep != PROJECT:
                problems.append(f"{dist} requires {text.split(';')[0].strip()}: {dep} is not pinned")
                continue
            if dep != PROJECT and not SpecifierSet(str(req.specifier)).contains(pins[dep], prereleases=True):
                problems.append(f"{dist} requires {text.split(';')[0].strip()}, the lock pins {dep}=={pins[dep]}")
            if not req.extras <= extras.setdefault(dep, set()) or dep not in seen:
                extras[dep] |= req.extras
                todo.append(dep)
    problems += [f"{dist}=={pins[dist]} is pinned but nothing requires it" for dist in sorted(set(pins) - set(seen))]
    if name not in MACHINE_CONFIG:
        local = [d for d, p in packages.items() if p.get("local") and d != PROJECT]
        problems += [f"{dist}: {packages[dist]['file']} is a local wheel" for dist in local]
    major = lock_environment(name).cuda
    for dist in pins:
        other = CUDA_SUFFIX.search(dist)
        if other and int(other.group(1)) != major:
            problems.append(f"{dist}: a CUDA {other.group(1)} library in an environment of CUDA {major}")
    return problems


def _accepts(spec: str, version: str | None) -> bool:
    from packaging.specifiers import SpecifierSet

    return version is not None and SpecifierSet(spec).contains(version, prereleases=True)


def dry_run(name: str) -> str:
    """pip's dry-run install of the lock file itself with every dependency, as ``make install``
    would resolve it (GPU locks: from the registry alone). Raises RuntimeError when it does not
    resolve or would install a package the lock does not pin, or another version."""
    inputs = inputs_of(name)
    unreachable = [m.group(2) for ln in inputs if (m := INDEX_OPTION.match(ln)) and not reachable(m.group(2))]
    if unreachable:  # pip would retry it for minutes, then fail on the packages it serves
        raise RuntimeError(f"cannot resolve it here: {', '.join(unreachable)} is unreachable")
    project = [ln for ln in inputs if ln.startswith("-e ")]
    report = resolve(name, [*project, f"-r {LOCKS / f'{name}.txt'}"], LOCKS.parent)
    pins = pins_of(name)
    extra = [
        f"{normalise(e['metadata']['name'])}=={e['metadata']['version']}"
        for e in report["install"]
        if normalise(e["metadata"]["name"]) != PROJECT
        and pins.get(normalise(e["metadata"]["name"]), "").split("+")[0] != e["metadata"]["version"].split("+")[0]
    ]
    if extra:
        raise RuntimeError(f"installs what the lock does not pin: {', '.join(extra)}")
    size = download_size(name)
    count = len(report["install"]) - len(project)
    return f"{name}: {count} packages resolve as pinned ({size / 2**30:.2f} GiB of wheels to download)"


def download_size(name: str, locks: Path = LOCKS) -> int:
    """Bytes of the lock's wheels, from its stored metadata (what an install downloads)."""
    packages = json.loads((locks / f"{name}.meta.json").read_text())["packages"]
    return sum(p.get("size") or 0 for d, p in packages.items() if d != PROJECT)


def main(argv: list[str]) -> int:
    checking = argv[:1] == ["--check"]
    names = argv[1:] if checking else argv
    try:
        names = lock_names(names)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        print(f"{'checking' if checking else 'resolving'} {name} ...", flush=True)
        try:
            if checking:
                problems = check(name)
                if problems:
                    raise RuntimeError("\n".join(problems))
                print(f"  {dry_run(name)}; its stored metadata is consistent", flush=True)
            else:
                print(f"  {lock(name)} -> locks/{name}.txt", flush=True)
        except RuntimeError as exc:
            failed += 1
            what = "does not check out" if checking else "pip could not resolve it; the lock is unchanged"
            print(f"  {name}: {what}:\n{exc}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

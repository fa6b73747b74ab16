"""After pip: does this environment hold the builds its lock and variant name?

pip installs the first build its configuration offers. A version's local label (``+cpu``) does
not count for ``==``, so where pip's configuration offers a local ``torch-2.13.0+cpu`` wheel (as on
this project's machines) it satisfies ``torch==2.13.0`` in a GPU lock: the environment would get a
CPU torch, silently. ``make install`` installs a GPU variant's locks from the registry alone, and
then runs this check in every environment it made (``python -m harness.install.builds VARIANT
NAME``), which fails with one line naming the package, the build it got and the one needed:

- every pin of the environment's lock is installed at the version the lock resolved (its
  ``.meta.json``: ``2.13.0+cpu`` on the cpu lock, ``2.13.0`` on cuda13), local label included
  (a CPU environment accepts another build of the same release, with a note: it runs either);
- on an environment with a CUDA major: torch's CUDA (``torch.version.cuda``), jaxlib's CUDA plugin
  (``jax-cudaN-plugin`` and ``-pjrt`` at jaxlib's version, no other major's) and TensorFlow's
  ``build_info`` (a CUDA build of that major) each name that major.

``python -m harness.install.builds diff`` (``make lock-diff``) lists what this environment holds
that differs from its lock: a plugin's framework installed into ``.venv`` later, and what its
dependencies changed.

Importing a framework's CUDA build needs no GPU, so the check runs on any machine. Standard
library and the frameworks themselves only.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import json
import re
import runpy
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.install.lock import LOCKS, normalise, pins_of
from harness.install.variant import ENVIRONMENTS, Environment


def lock_pins(lock: str, locks: Path = LOCKS) -> dict[str, str]:
    """Name -> the version ``locks/LOCK`` resolved: the pin in ``locks/LOCK.txt``, with the local
    label its ``.meta.json`` keeps where the pin dropped it (``+cpu``: a local wheel's)."""
    pins = pins_of(lock, locks)
    meta = locks / f"{lock}.meta.json"
    if meta.is_file():
        for name, package in json.loads(meta.read_text()).get("packages", {}).items():
            # the pin drops a local wheel's label (lock.pin); a pin with a label of its own stands
            if normalise(name) in pins and release(package.get("version") or "") == pins[normalise(name)]:
                pins[normalise(name)] = package["version"]
    return pins


def release(version: str) -> str:
    """A version without its local label: ``2.13.0+cpu`` -> ``2.13.0``."""
    return version.split("+", 1)[0]


def other_builds(pins: Mapping[str, str], versions: Mapping[str, str]) -> list[str]:
    """Pins installed as another build of the same release (a CPU environment runs either: on a
    machine whose pip configuration offers no local CPU wheel, the registry's torch 2.13.0 is its
    CUDA 13 build, 0.5 GiB with 2.1 GiB of CUDA libraries)."""
    return [
        f"{name} {versions[name]} where the lock resolved {want} (another build of the same release)"
        for name, want in sorted(pins.items())
        if name in versions and versions[name] != want and release(versions[name]) == release(want)
    ]


def installed_versions() -> dict[str, str]:
    """Name -> version of every distribution this interpreter sees."""
    return {normalise(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def framework_builds() -> dict[str, str | None]:
    """The CUDA version each installed framework was built for (None: a CPU build), read from the
    framework itself: the build module each one generates when it is built (``torch/version.py``'s
    ``cuda``, which ``torch.version.cuda`` is; TensorFlow's ``python/platform/build_info.py``,
    which ``tf.sysconfig.get_build_info()`` returns), run alone, so that neither framework is
    imported (seconds, and TensorFlow's C++ start-up lines on stderr before the check's own line).
    A framework that is not installed is left out."""
    found: dict[str, str | None] = {}
    torch_version = _package_file("torch", "version.py")
    if torch_version is not None:
        found["torch"] = runpy.run_path(str(torch_version)).get("cuda")
    tf_build = _package_file("tensorflow", "python", "platform", "build_info.py")
    if tf_build is not None:
        info = runpy.run_path(str(tf_build)).get("build_info", {})
        found["tensorflow"] = info.get("cuda_version") if info.get("is_cuda_build") else None
    return found


def _package_file(package: str, *parts: str) -> Path | None:
    """A file inside an installed package, found without importing the package; None if either is missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.is_file() else None


def problems(
    environment: Environment,
    pins: Mapping[str, str],
    versions: Mapping[str, str],
    builds: Callable[[], Mapping[str, str | None]] = framework_builds,
) -> list[str]:
    """What this environment holds that its lock or variant does not name, one line each, the
    most telling first: a framework built for another device, another build of a pinned release,
    another version, a pin not installed."""
    lock = f"locks/{environment.lock}.txt"
    builds_wrong: list[str]
    builds_wrong, labels, versions_wrong, missing = [], [], [], []
    for name, want in sorted(pins.items()):
        got = versions.get(name)
        if got is None:
            missing.append(f"{name} is not installed; {lock} pins {want}")
        elif got != want and release(got) == release(want):
            if environment.cuda is not None:
                labels.append(f"{name} {got} is installed; {lock} resolved {want}")
        elif got != want:
            versions_wrong.append(f"{name} {got} is installed; {lock} resolved {want}")
    major = environment.cuda
    out = builds_wrong
    if major is None:
        return labels + versions_wrong + missing
    for framework, cuda in builds().items():
        if cuda is None or cuda.split(".")[0] != str(major):
            got = "a CPU build" if cuda is None else f"a CUDA {cuda} build"
            out.append(f"{framework} {versions.get(framework, '?')} is {got}; this environment needs CUDA {major}")
    if "jaxlib" in versions:
        jaxlib = versions["jaxlib"]
        for part in ("plugin", "pjrt"):
            name = f"jax-cuda{major}-{part}"
            if versions.get(name) != jaxlib:
                got = versions.get(name, "not installed")
                out.append(f"jaxlib {jaxlib} needs {name} {jaxlib} for CUDA {major}; {name} is {got}")
        others = sorted(
            n for n in versions if re.fullmatch(r"jax-cuda\d+-(plugin|pjrt)", n) and f"cuda{major}-" not in n
        )
        if others:
            out.append(
                f"{', '.join(others)} installed beside CUDA {major}'s jaxlib plugin: one CUDA major per environment"
            )
    return out + labels + versions_wrong + missing


#: Distributions every environment holds besides its lock: the installer's and this project.
NOT_LOCKED = frozenset({"pip", "setuptools", "wheel", "dlcompare"})


def differences(pins: Mapping[str, str], versions: Mapping[str, str]) -> list[str]:
    """What an environment holds that differs from its lock, one line each, sorted by name: a pin
    at another version (or build), a pin not installed, a package the lock does not name (a
    plugin's framework installed later, and what it brought)."""
    out = []
    for name in sorted(set(pins) | set(versions) - NOT_LOCKED):
        want, got = pins.get(name), versions.get(name)
        if want is None:
            out.append(f"{name} {got}: not in the lock")
        elif got is None:
            out.append(f"{name}: not installed (the lock pins {want})")
        elif got != want:
            out.append(f"{name} {got}: the lock resolved {want}")
    return out


def environment_of(variant: str, name: str) -> Environment:
    """The variant's environment called ``name``; ValueError naming the valid ones."""
    if variant not in ENVIRONMENTS:
        raise ValueError(f"variant {variant!r}: valid: {', '.join(ENVIRONMENTS)}")
    for environment in ENVIRONMENTS[variant]:
        if environment.name == name:
            return environment
    raise ValueError(f"environment {name!r} of {variant}: valid: {', '.join(e.name for e in ENVIRONMENTS[variant])}")


def diff(variant: str | None) -> int:
    """``make lock-diff``: this environment against its lock (``differences``); exit 0 either way."""
    from harness.install.variant import installed

    variant = variant or installed()
    if variant is None:
        print("error: no install variant recorded here (run make install first)", file=sys.stderr)
        return 2
    environment = environment_of(variant, "main")
    lines = differences(lock_pins(environment.lock), installed_versions())
    print(f"{sys.prefix} against locks/{environment.lock}.txt: " + (f"{len(lines)} differ" if lines else "as locked"))
    for line in lines:
        print(f"  {line}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["diff"] and len(argv) <= 2:
        try:
            return diff(argv[1] if len(argv) == 2 else None)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if len(argv) != 2:
        print("usage: python -m harness.install.builds VARIANT ENVIRONMENT | diff [VARIANT]", file=sys.stderr)
        return 2
    try:
        environment = environment_of(*argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = problems(environment, lock_pins(environment.lock), installed_versions())
    where = f"{sys.prefix} ({argv[0]} variant, environment {environment.name})"
    if found:
        # the first line alone is the make's one-line error; the rest follow for whoever reads on
        print(f"error: {where}: {found[0]}", file=sys.stderr)
        for line in found[1:]:
            print(f"  also: {line}", file=sys.stderr)
        return 2
    for line in other_builds(lock_pins(environment.lock), installed_versions()):
        print(f"note: {line}")
    print(f"builds: {where} holds what locks/{environment.lock}.txt resolved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Python environments: a variant's family environments, and named ones for ``--env NAME=PYTHON``.

A GPU variant installs more than one environment (harness.install.variant.ENVIRONMENTS: TensorFlow's
CUDA 12 stack in ``.venv-tf`` beside ``.venv``'s CUDA 13 one); ``make install`` records them in
``.venv/dlcompare-environments.json`` (``python -m harness.install.environments --record VARIANT``)
and every worker of a framework family runs under its environment's interpreter (``family_python``).

Named environments are a framework version as an axis of a run.

``python -m harness.install.environments NAME PACKAGE...`` (``make env``) creates ``.venv-NAME`` layered
over the current environment: a ``.pth`` file puts this environment's packages after the new
one's, so only what is named (``torch==2.14.0``) is installed, shadowing the base version, and
the harness's own dependencies come from the base. pip runs with this machine's configuration.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from typing import Any

#: A named environment's name (``.venv-NAME``, the ``@NAME`` of its adapters); ``--env`` checks it too.
ENV_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
REPO = Path(__file__).resolve().parents[2]
LAYER = "dlcompare-base.pth"
RECORD = "dlcompare-environments.json"


def python_of(folder: Path) -> Path:
    return folder / "bin" / "python"


def create(name: str, packages: list[str], root: Path = REPO) -> Path:
    """Create (or update) ``root/.venv-NAME`` with ``packages``; returns its interpreter.
    Raises ValueError for a bad name and RuntimeError with pip's message when pip fails."""
    if not ENV_NAME.match(name):
        raise ValueError(f"environment name {name!r}: use letters, digits and . _ + -")
    folder = root / f".venv-{name}"
    if not python_of(folder).exists():
        venv.EnvBuilder(with_pip=False).create(folder)  # this environment's pip installs into it
    purelib = subprocess.run(
        [str(python_of(folder)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / LAYER).write_text(sysconfig.get_paths()["purelib"] + "\n")
    if packages:
        pip = [sys.executable, "-m", "pip", "--python", str(python_of(folder)), "install", "--quiet"]
        proc = subprocess.run([*pip, *packages], capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "is ignored" not in ln]
            raise RuntimeError("\n".join(errors[-8:]) or f"pip exited {proc.returncode}")
    return python_of(folder)


def record(variant_name: str, main_prefix: Path = Path(sys.prefix)) -> dict[str, Any]:
    """The variant's environments as ``make install`` made them beside ``main_prefix`` (``.venv``,
    the others ``.venv-NAME``), written to ``main_prefix/dlcompare-environments.json``. Raises
    ValueError for an unknown variant or an environment whose interpreter is missing."""
    from harness.install.variant import ENVIRONMENTS

    if variant_name not in ENVIRONMENTS:
        raise ValueError(f"variant {variant_name!r}: valid: {', '.join(ENVIRONMENTS)}")
    found = {}
    for environment in ENVIRONMENTS[variant_name]:
        folder = main_prefix if environment.name == "main" else Path(f"{main_prefix}-{environment.name}")
        if not python_of(folder).exists():
            raise ValueError(f"environment {environment.name}: no interpreter at {python_of(folder)}")
        found[environment.name] = {
            "folder": str(folder.absolute()),
            "python": str(python_of(folder).absolute()),
            "lock": f"locks/{environment.lock}.txt",
            "cuda": environment.cuda,
            "frameworks": list(environment.frameworks),  # empty: every family no other one holds
        }
    data = {"variant": variant_name, "environments": found}
    (main_prefix / RECORD).write_text(json.dumps(data, indent=1) + "\n")
    return data


@functools.cache
def installed(prefix: str = sys.prefix) -> dict[str, Any]:
    """This installation's environments (``record``'s file in ``prefix``), {} where make made only one."""
    path = Path(prefix) / RECORD
    return json.loads(path.read_text()).get("environments", {}) if path.is_file() else {}


def describe(prefix: str = sys.prefix) -> dict[str, Any]:
    """Every environment this run's workers may use, as env.json names them: ``installed``'s,
    or this one alone (``main``) where make recorded none."""
    return installed(prefix) or {
        "main": {"folder": prefix, "python": sys.executable, "lock": None, "cuda": None, "frameworks": []}
    }


def family_python(framework: str, prefix: str = sys.prefix) -> str | None:
    """The interpreter of the environment that holds ``framework`` when it is not this one; None
    where this environment holds it (or make installed one environment)."""
    for environment in installed(prefix).values():
        if framework in environment["frameworks"] and Path(environment["folder"]) != Path(prefix):
            return environment["python"]
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"] and len(argv) == 2:
        try:
            data = record(argv[1])
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for name, environment in data["environments"].items():
            print(f"environment {name}: {environment['folder']} ({environment['lock']})")
        return 0
    if len(argv) < 2:
        print("usage: python -m harness.install.environments NAME PACKAGE [PACKAGE ...]", file=sys.stderr)
        return 2
    name, packages = argv[0], argv[1:]
    try:
        python = create(name, packages)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"environment {name}: {python.relative_to(REPO)} ({' '.join(packages)} over {sys.prefix})")
    print(f'use it: make bench ARGS="--env {name}={python.relative_to(REPO)}"')
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

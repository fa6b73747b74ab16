"""Named Python environments for ``--env NAME=PYTHON``: a framework version as an axis of a run.

``python -m harness.install.environments NAME PACKAGE...`` (``make env``) creates ``.venv-NAME`` layered
over the current environment: a ``.pth`` file puts this environment's packages after the new
one's, so only what is named (``torch==2.14.0``) is installed, shadowing the base version, and
the harness's own dependencies come from the base. pip runs with this machine's configuration.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

#: A named environment's name (``.venv-NAME``, the ``@NAME`` of its adapters); ``--env`` checks it too.
ENV_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
REPO = Path(__file__).resolve().parents[2]
LAYER = "dlcompare-base.pth"


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


def main(argv: list[str]) -> int:
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

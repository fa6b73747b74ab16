"""What ``make install`` needs from the machine, checked before anything is downloaded.

``python3 -m harness.install.prerequisites VARIANT [FOLDER]`` runs under the interpreter that will
create the environments (the Makefile's ``PYTHON``), before any environment exists, so it uses
the standard library only. Each missing piece is one line naming what to install; any of them
stops ``make install`` (exit 2) before a 0.8 to 7.9 GiB download:

- the Python the locks were resolved for (their ``.meta.json``'s marker environment: CPython 3.11);
- ``venv`` able to install pip into a new environment (``ensurepip``: Debian's ``python3.11-venv``);
- a C compiler and the Python headers: torch-compile builds its kernels with one (Inductor's C++
  on a CPU, Triton's launcher on a GPU: Debian's ``build-essential`` and ``python3.11-dev``);
- free disk space at the folder for twice the variant's download (the wheels and what they unpack to).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from harness.install.lock import LOCKS, download_size
from harness.install.variant import ENVIRONMENTS

#: This interpreter's ``Python.h`` (what its ``python3.X-dev`` package installs).
HEADERS = Path(sysconfig.get_paths()["include"]) / "Python.h"
SKIP_HINT = "make install CHECK_PREREQUISITES=0 installs without it"


def download_bytes(variant: str, locks: Path = LOCKS) -> int:
    """What the variant's locks download (the registry's sizes in their ``.meta.json``)."""
    return sum(download_size(e.lock, locks) for e in ENVIRONMENTS[variant])


def locked_python(variant: str, locks: Path = LOCKS) -> str | None:
    """The ``major.minor`` the variant's main lock was resolved for."""
    meta = json.loads((locks / f"{ENVIRONMENTS[variant][0].lock}.meta.json").read_text())
    return meta.get("marker_environment", {}).get("python_version")


def problems(
    variant: str,
    folder: Path,
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}",
    which: Callable[[str], str | None] = shutil.which,
    has_module: Callable[[str], bool] = lambda name: importlib.util.find_spec(name) is not None,
    headers: Path = HEADERS,
    free_bytes: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free,
    locks: Path = LOCKS,
) -> list[str]:
    """What this machine lacks for ``make install VARIANT=variant`` into ``folder``, one line each."""
    out = []
    want = locked_python(variant, locks)
    if want and python != want:
        out.append(
            f"Python {want} is needed (locks/{ENVIRONMENTS[variant][0].lock}.txt was resolved for it), "
            f"this is Python {python}: install python{want} and run make PYTHON=python{want}"
        )
    if not has_module("venv") or not has_module("ensurepip"):
        out.append(f"the venv module cannot give a new environment pip (no ensurepip): install python{python}-venv")
    if not any(which(cc) for cc in ("cc", "gcc", "clang")):
        out.append(
            "no C compiler (cc, gcc or clang) on PATH: torch-compile builds its kernels with one; "
            f"install gcc (Debian/Ubuntu: build-essential), or {SKIP_HINT}"
        )
    if not headers.is_file():
        out.append(
            f"no Python headers ({headers}): torch-compile's kernels include them; "
            f"install python{python}-dev, or {SKIP_HINT}"
        )
    need = 2 * download_bytes(variant, locks)
    free = free_bytes(_existing(folder))
    if free < need:
        out.append(
            f"{free / 2**30:.1f} GiB free at {_existing(folder)}; the {variant} variant downloads "
            f"{need / 2 / 2**30:.1f} GiB and needs about {need / 2**30:.1f} GiB installed"
        )
    return out


def _existing(folder: Path) -> Path:
    """``folder``, or its nearest existing parent (the environment may not exist yet)."""
    folder = folder.absolute()
    while not folder.exists():
        folder = folder.parent
    return folder


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python3 -m harness.install.prerequisites VARIANT [FOLDER]", file=sys.stderr)
        return 2
    if argv[0] not in ENVIRONMENTS:
        print(f"error: variant {argv[0]!r}: valid: {', '.join(ENVIRONMENTS)}", file=sys.stderr)
        return 2
    found = problems(argv[0], Path(argv[1] if len(argv) == 2 else "."))
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Files owned by more than one installed distribution of one environment:
``python -m harness.checks.ownership`` (run by the tests and ``make gpu-check`` with each
environment's interpreter). Two distributions writing one path (``nvidia-cudnn-cu12`` and
``nvidia-cudnn-cu13`` both install ``nvidia/cudnn/lib/libcudnn.so.9``) leave whichever pip wrote
last, and uninstalling either deletes the other's file. Standard library only."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import defaultdict
from importlib import metadata


def shared_paths(paths: list[str] | None = None) -> dict[str, list[str]]:
    """{path: the distributions whose RECORD lists it} for every path listed by two or more
    distributions found on ``paths`` (default: this interpreter's sys.path); compiled bytecode
    (``__pycache__``), which pip writes itself, is left out."""
    owners: dict[str, set[str]] = defaultdict(set)
    for dist in metadata.distributions(path=paths if paths is not None else sys.path):
        base, name = str(dist.locate_file("")), dist.metadata["Name"]
        # RECORD read as text: Distribution.files builds a path object per file, seconds per 10k files.
        for row in csv.reader((dist.read_text("RECORD") or "").splitlines()):
            if row and "__pycache__" not in row[0]:
                # normpath, not resolve(): a symlink is a path of its own
                owners[os.path.normpath(os.path.join(base, row[0]))].add(name)
    return {path: sorted(names) for path, names in sorted(owners.items()) if len(names) > 1}


def main() -> int:
    shared = shared_paths()
    print(json.dumps({"python": sys.executable, "shared": shared}, indent=1))
    return 1 if shared else 0


if __name__ == "__main__":
    raise SystemExit(main())

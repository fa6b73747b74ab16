"""The CUDA libraries a process has mapped (``/proc/self/maps``) and the CUDA major each belongs
to: the worker's ``libraries`` mode reports them after a first step on the GPU, and ``make
doctor`` fails where one process mapped libraries of two CUDA majors (a torch worker loading
TensorFlow's ``libcusparse.so.12`` from CUDA 12 next to its CUDA 13 runtime). Standard library only.

A library's major comes from the distribution that installed it (``nvidia-cudnn-cu12`` -> 12;
CUDA 13's wheels dropped the suffix: ``nvidia-cusparse`` -> 13, ``nvidia/cu13/lib``), else from a
toolkit folder in its path (``/usr/local/cuda-12.8/``), else from the runtime's soname
(``libcudart.so.12``); sonames of the other libraries do not follow the CUDA major
(``libcusparse.so.12`` is in CUDA 12 and 13 alike). The driver (``libcuda.so``) belongs to none.

The same reading judges LD_LIBRARY_PATH before any worker starts (``wrong_majors``: ``make doctor``
and ``bench``, harness.checks.doctor.library_path_problems): the dynamic loader searches its
folders before a wheel's own RUNPATH, so a folder of another CUDA major's libraries there is loaded
in place of an environment's own where the names agree.
"""

from __future__ import annotations

import csv
import os
import re
import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

LIBRARY = re.compile(
    r"/lib(cudart|cublas|cublasLt|cudnn\w*|nccl|cusparse|cusparseLt|curand|cufft|cufftw|cusolver|cusolverMg|nvrtc"
    r"|nvrtc-builtins|nvJitLink|cupti|nvshmem\w*|cufile\w*|nvToolsExt|nvperf\w*|nvblas)\.so[.\d]*$"
)
SUFFIX = re.compile(r"-cu(\d+)$")
TOOLKIT_FOLDER = re.compile(r"/(?:cuda-|nvidia/cu)(\d+)[./]")
RUNTIME = re.compile(r"/libcudart\.so\.(\d+)")


def mapped(maps: str) -> list[str]:
    """The CUDA library files in a ``/proc/<pid>/maps`` text, each once, in order of first mapping."""
    paths = (line.split(None, 5)[5].strip() for line in maps.splitlines() if len(line.split(None, 5)) == 6)
    return list(dict.fromkeys(p for p in paths if LIBRARY.search(p)))


def owners(paths: list[str]) -> dict[str, str]:
    """{path: the installed distribution whose RECORD lists it} for those of ``paths`` pip installed."""
    wanted, found = {os.path.realpath(p): p for p in paths}, {}
    for dist in metadata.distributions(path=sys.path):
        name = dist.metadata["Name"] or ""
        if not name.lower().startswith(("nvidia", "jax-cuda", "tensorflow", "torch", "cuda")):
            continue
        base = str(dist.locate_file(""))
        for row in csv.reader((dist.read_text("RECORD") or "").splitlines()):
            if row and ".so" in row[0]:
                path = os.path.realpath(os.path.join(base, row[0]))
                if path in wanted:
                    found[wanted[path]] = name
    return found


def cuda_major(path: str, owner: str | None) -> int | None:
    """The CUDA major ``path`` (installed by ``owner``, if known) belongs to; None where nothing tells."""
    if owner and (m := SUFFIX.search(owner.lower())):
        return int(m.group(1))
    if m := TOOLKIT_FOLDER.search(path):
        return int(m.group(1))
    if owner and owner.lower().startswith("nvidia-") and "/site-packages/nvidia/" in path:
        return 13  # CUDA 13's wheels are the first without a -cuNN suffix
    if m := RUNTIME.search(path):
        return int(m.group(1))
    return None


def report(maps: str) -> dict[str, Any]:
    """{"libraries": [{path, owner, cuda}], "majors": [...]} of a maps text, owners from this environment."""
    paths = mapped(maps)
    found = owners(paths)
    libraries = [{"path": p, "owner": found.get(p), "cuda": cuda_major(p, found.get(p))} for p in paths]
    return {"libraries": libraries, "majors": sorted({lib["cuda"] for lib in libraries if lib["cuda"] is not None})}


def this_process() -> dict[str, Any]:
    with open("/proc/self/maps") as f:
        return report(f.read())


def library_path_majors(library_path: str) -> dict[str, dict[str, Any]]:
    """{folder: {"libraries": [file names], "majors": [...]}} for each folder of ``library_path``
    (an LD_LIBRARY_PATH value) that holds CUDA libraries (``LIBRARY``), majors as ``cuda_major``
    reads them from the real path and, for files pip installed here, their owner."""
    found: dict[str, dict[str, Any]] = {}
    for folder in dict.fromkeys(filter(None, library_path.split(os.pathsep))):
        try:
            names = sorted(os.listdir(folder))
        except OSError:  # a folder that is not there is no library either
            continue
        paths = [os.path.join(folder, n) for n in names if LIBRARY.search("/" + n)]
        if not paths:
            continue
        owner = owners(paths)
        majors = {cuda_major(os.path.realpath(p), owner.get(p)) for p in paths}
        found[folder] = {
            "libraries": [os.path.basename(p) for p in paths],
            "majors": sorted(m for m in majors if m is not None),
        }
    return found


def wrong_majors(library_path: str, environments: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per folder of ``library_path`` (LD_LIBRARY_PATH) and environment whose CUDA majors
    differ: ``environments`` as harness.install.environments.describe gives them (name ->
    {"folder", "cuda"}). Every worker inherits LD_LIBRARY_PATH, so on a variant of two majors
    (cuda13: .venv CUDA 13, .venv-tf CUDA 12) any such folder is wrong for one of them. Folders whose
    libraries tell no major, and environments of none (CPU builds), are not judged."""
    lines = []
    for folder, found in library_path_majors(library_path).items():
        shown = ", ".join(found["libraries"][:3]) + (", ..." if len(found["libraries"]) > 3 else "")
        for name, environment in environments.items():
            cuda = environment.get("cuda")
            wrong = [m for m in found["majors"] if cuda is not None and m != cuda]
            if wrong:
                lines.append(
                    f"LD_LIBRARY_PATH holds {folder}, CUDA {'/'.join(map(str, wrong))} libraries ({shown}), and "
                    f"the {name} environment ({environment.get('folder')}) expects CUDA {cuda}: its workers "
                    f"would load them in place of their own; remove {folder} from LD_LIBRARY_PATH"
                )
    return lines

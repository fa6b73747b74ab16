"""The lock files checked offline from their stored metadata (locks/<lock>.meta.json, written by
`make lock` from pip's report): every requirement of every pinned wheel is pinned at a version it
accepts, GPU locks come from the registry (no local CPU build of torch), one CUDA major per lock.
`make lock-check` adds pip's own dry-run install of each lock with its dependencies (network).
And no file of an installed environment is owned by two distributions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from harness.checks import ownership
from harness.install import lock, variant
from harness.install.environments import installed
from tests.conftest import REPO


@pytest.mark.parametrize("name", variant.LOCK_NAMES)
def test_every_requirement_of_every_pinned_wheel_is_pinned_at_a_version_it_accepts(name):
    assert lock.check(name) == []


def _edited(tmp_path, name: str, old: str, new: str):
    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks", locks)
    path = locks / f"{name}.txt"
    text = path.read_text()
    assert re.search(old, text, flags=re.M), old
    path.write_text(re.sub(old, new, text, flags=re.M))
    return locks


def test_the_check_finds_a_pin_the_requiring_wheel_rejects(tmp_path):
    """The conflict the first cuda13 lock had: a cuDNN newer than torch's exact pin."""
    locks = _edited(tmp_path, "cuda13", r"^nvidia-cudnn-cu13==.*$", "nvidia-cudnn-cu13==9.28.1.4")
    problems = lock.check("cuda13", locks)
    assert any(p.startswith("torch requires nvidia-cudnn-cu13==") and p.endswith("9.28.1.4") for p in problems)


def test_the_check_finds_a_missing_dependency_an_unrequired_pin_and_another_cuda_major(tmp_path):
    locks = _edited(tmp_path, "cuda13", r"^triton==.*\n", "nvidia-cudnn-cu12==9.28.0.42\n")
    problems = lock.check("cuda13", locks)
    assert any(p.startswith("torch requires triton") and "not pinned" in p for p in problems), problems
    assert "nvidia-cudnn-cu12: a CUDA 12 library in an environment of CUDA 13" in problems
    assert "nvidia-cudnn-cu12==9.28.0.42 is pinned but nothing requires it" in problems


def test_gpu_locks_are_the_registrys_cuda_builds_not_this_machines_cpu_wheel():
    for name in variant.LOCK_NAMES:
        meta = json.loads((REPO / "locks" / f"{name}.meta.json").read_text())
        local = [d for d, p in meta["packages"].items() if p["local"] and d != lock.PROJECT]
        if name in lock.MACHINE_CONFIG:
            continue
        assert meta["resolved_from"] == f"{lock.REGISTRY} only" and local == [], name
    torch = json.loads((REPO / "locks" / "cuda13.meta.json").read_text())["packages"]["torch"]
    assert not torch["local"] and "+" not in torch["version"]
    assert any(r.startswith("nvidia-cudnn-cu13") for r in torch["requires_dist"])  # the CUDA build's metadata
    tf = lock.pins_of("tf-cuda12")
    assert "nvidia-cudnn-cu12" in tf and not any(d.endswith("-cu13") for d in tf)
    assert "nvidia-cuda-nvcc-cu12" in tf  # ptxas for XLA, in TensorFlow's [and-cuda]


# --- one owner per installed file ------------------------------------------------------------


def _dist(site, name: str, files: list[str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/RECORD"]))


def test_a_path_two_distributions_install_is_found(tmp_path):
    """The cu12/cu13 clash, as two distributions' RECORD files list it (nothing else stands in)."""
    _dist(tmp_path, "nvidia-cudnn-cu12", ["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/__pycache__/x.pyc"])
    _dist(tmp_path, "nvidia-cudnn-cu13", ["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/__pycache__/x.pyc"])
    _dist(tmp_path, "other", ["other/__init__.py"])
    shared = ownership.shared_paths([str(tmp_path)])
    assert shared == {str(tmp_path / "nvidia/cudnn/lib/libcudnn.so.9"): ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"]}


def _environments() -> list[str]:
    """Every environment make installed here: this one and the ones it recorded beside it."""
    found = [sys.executable] + [e["python"] for e in installed().values()]
    return list(dict.fromkeys(found))


@pytest.mark.parametrize("python", _environments())
def test_no_file_is_owned_by_two_installed_distributions(python):
    proc = subprocess.run([python, "-m", "harness.checks.ownership"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["shared"] == {}

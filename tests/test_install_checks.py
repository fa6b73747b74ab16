"""``make install``'s checks: the machine's prerequisites before any download
(harness.install.prerequisites), and after it the builds each environment holds
(harness.install.builds; a GPU variant installs from the registry alone): a GPU environment
either holds the builds its lock names or ``make install`` fails with one line.

The real CPU builds of this machine stand in for a GPU variant's wrong install: the check must
find them wrong for cuda13. The GPU builds it must accept are stand-in versions (no CUDA wheel is
installed here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.install import builds, variant
from harness.install.variant import ENVIRONMENTS, TF_ENV
from tests.test_gpu_setup import REPO, no_driver_path, run_make

MAIN_CUDA13 = ENVIRONMENTS["cuda13"][0]
JAX_CUDA13 = {"jaxlib": "0.10.2", "jax-cuda13-plugin": "0.10.2", "jax-cuda13-pjrt": "0.10.2"}


def test_a_locks_pins_carry_the_build_it_resolved():
    cpu, cuda13 = builds.lock_pins("cpu"), builds.lock_pins("cuda13")
    assert cpu["torch"] == "2.13.0+cpu", "the cpu lock resolved the local CPU wheel: its label is part of the build"
    assert cuda13["torch"] == "2.13.0" and cuda13["jax-cuda13-plugin"] == "0.10.2"
    assert builds.lock_pins("cuda12")["torch"] == "2.10.0", "the registry's newest CUDA 12 torch"
    assert "tensorflow-cpu" in cpu, "names compare as PEP 503 normalises them"


#: The variant make installed the suite's environment with (cpu where make recorded none).
INSTALLED = variant.installed() or "cpu"
#: The tests that use this machine's CPU torch as a GPU environment's wrong build need the cpu variant.
CPU_BUILDS = pytest.mark.skipif(INSTALLED != "cpu", reason=f"the {INSTALLED} variant has no CPU torch to stand in")


@pytest.mark.workers
def test_this_machines_install_holds_what_its_variants_lock_resolved():
    """The suite's own environment as make installed it: nothing to report. On a GPU machine this
    is the check of the real CUDA builds (torch's CUDA, jaxlib's plugin) against the variant."""
    env = ENVIRONMENTS[INSTALLED][0]
    assert builds.problems(env, builds.lock_pins(env.lock), builds.installed_versions()) == []


@CPU_BUILDS
@pytest.mark.workers
def test_the_real_cpu_torch_in_a_cuda13_environment_is_named_as_the_wrong_build():
    """What a plain ``pip install -r locks/cuda13.txt`` gives on this project's machines."""
    found = builds.problems(MAIN_CUDA13, builds.lock_pins("cuda13"), builds.installed_versions())
    assert found[0] == "torch 2.13.0+cpu is a CPU build; this environment needs CUDA 13", "the most telling first"
    assert "torch 2.13.0+cpu is installed; locks/cuda13.txt resolved 2.13.0" in found
    assert "jaxlib 0.10.2 needs jax-cuda13-plugin 0.10.2 for CUDA 13; jax-cuda13-plugin is not installed" in found


def test_a_cpu_environment_accepts_another_build_of_the_same_release_and_says_so():
    """A machine whose pip configuration offers no CPU wheel gets the registry's (CUDA) torch."""
    cpu = ENVIRONMENTS["cpu"][0]
    pins = {"torch": "2.13.0+cpu", "numpy": "2.3.0"}
    versions = {"torch": "2.13.0", "numpy": "2.3.0"}
    assert builds.problems(cpu, pins, versions, lambda: {"torch": "13.0"}) == []
    assert builds.other_builds(pins, versions) == [
        "torch 2.13.0 where the lock resolved 2.13.0+cpu (another build of the same release)"
    ]
    assert builds.problems(cpu, pins, {**versions, "numpy": "2.2.0"}) == [
        "numpy 2.2.0 is installed; locks/cpu.txt resolved 2.3.0"
    ], "another release is wrong anywhere"


def test_the_builds_a_gpu_environment_needs_pass_and_any_other_major_is_named():
    pins = {"torch": "2.13.0", **JAX_CUDA13}
    versions = {**pins, "numpy": "2.3.0"}  # what the lock does not pin is not judged
    assert builds.problems(MAIN_CUDA13, pins, versions, lambda: {"torch": "13.0"}) == []
    cuda12_torch = builds.problems(MAIN_CUDA13, pins, versions, lambda: {"torch": "12.8"})
    assert cuda12_torch == ["torch 2.13.0 is a CUDA 12.8 build; this environment needs CUDA 13"]
    mixed = builds.problems(MAIN_CUDA13, pins, {**versions, "jax-cuda12-plugin": "0.10.2"}, lambda: {"torch": "13.0"})
    assert mixed == ["jax-cuda12-plugin installed beside CUDA 13's jaxlib plugin: one CUDA major per environment"]
    stale = builds.problems(MAIN_CUDA13, pins, {**versions, "jax-cuda13-pjrt": "0.9.0"}, lambda: {"torch": "13.0"})
    assert any("jaxlib 0.10.2 needs jax-cuda13-pjrt 0.10.2 for CUDA 13; jax-cuda13-pjrt is 0.9.0" in p for p in stale)
    # TensorFlow's environment: its build_info's CUDA, not the CPU wheel of the same version
    tf = {"tensorflow": "2.21.0"}
    assert builds.problems(TF_ENV, tf, tf, lambda: {"tensorflow": "12.5.1"}) == []
    assert builds.problems(TF_ENV, tf, tf, lambda: {"tensorflow": None}) == [
        "tensorflow 2.21.0 is a CPU build; this environment needs CUDA 12"
    ]
    assert builds.problems(TF_ENV, tf, {}, lambda: {}) == [
        "tensorflow is not installed; locks/tf-cuda12.txt pins 2.21.0"
    ]


@CPU_BUILDS
@pytest.mark.workers
def test_the_check_fails_make_with_one_line_naming_the_package_and_its_build():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.install.builds", "cuda13", "main"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: ") and "(cuda13 variant, environment main)" in first
    assert "2.13.0+cpu" in first and "torch" in first, first
    bad = subprocess.run(
        [sys.executable, "-m", "harness.install.builds", "cuda11", "main"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "error: variant 'cuda11': valid: cpu, cuda12, cuda13"
    with pytest.raises(ValueError, match="environment 'gpu' of cuda13: valid: main, tf"):
        builds.environment_of("cuda13", "gpu")


@pytest.mark.workers
def test_a_gpu_variant_installs_its_locks_from_the_registry_alone_and_checks_each_environment(tmp_path):
    proc = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cuda13")
    assert proc.returncode == 0, proc.stderr
    isolated = "PIP_CONFIG_FILE=/dev/null"  # no configuration file at all: not the machine's find-links
    lines = proc.stdout.splitlines()
    main_install = next(line for line in lines if "-r locks/cuda13.txt" in line)
    assert main_install.startswith(isolated) and "--isolated --index-url https://pypi.org/simple" in main_install
    extra_install = next(line for line in lines if "-r locks/$lock.txt" in line)
    assert isolated in extra_install and "--isolated --index-url https://pypi.org/simple" in extra_install
    assert "harness.install.builds cuda13 main" in proc.stdout and "harness.install.builds cuda13 $name" in proc.stdout
    # the check comes after the environment's install and before the stamp that says it is done
    assert proc.stdout.index("harness.install.builds cuda13 main") < proc.stdout.index("touch ")
    cpu = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cpu")
    cpu_install = next(line for line in cpu.stdout.splitlines() if "-r locks/cpu.txt" in line)
    assert isolated not in cpu_install, "the cpu variant takes the machine's CPU wheels"
    assert "harness.install.builds cpu main" in cpu.stdout


def test_the_docs_say_what_each_variant_installs_from_where():
    text = (REPO / "docs" / "gpu-and-environments.md").read_text()
    assert "harness/install/builds.py" in text and "PIP_CONFIG_FILE=/dev/null" in text


def test_lock_diff_lists_what_a_plugins_install_changed():
    """``make lock-diff``: a plugin's framework installed into .venv, and what its dependencies moved."""
    pins = {"opt-einsum": "3.4.0", "numpy": "2.3.0", "torch": "2.13.0+cpu"}
    versions = {"opt-einsum": "3.3.0", "numpy": "2.3.0", "paddlepaddle": "3.0.0", "pip": "26.3", "dlcompare": "0.1"}
    assert builds.differences(pins, versions) == [
        "opt-einsum 3.3.0: the lock resolved 3.4.0",
        "paddlepaddle 3.0.0: not in the lock",
        "torch: not installed (the lock pins 2.13.0+cpu)",
    ]
    assert builds.differences(pins, pins) == []


@pytest.mark.workers
def test_lock_diff_on_this_machines_install_says_as_locked():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.install.builds", "diff"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lock = ENVIRONMENTS[INSTALLED][0].lock
    assert proc.stdout.splitlines()[0].endswith(f"against locks/{lock}.txt: as locked"), proc.stdout


def _prerequisites(tmp_path, **given):
    from harness.install import prerequisites

    here = {
        "python": "3.11",
        "which": lambda name: f"/usr/bin/{name}",
        "has_module": lambda name: True,
        "headers": REPO / "pyproject.toml",  # a file that exists, standing in for Python.h
        "free_bytes": lambda path: 100 * 2**30,
    }
    return prerequisites.problems("cuda13", tmp_path / "venv", **{**here, **given})


def test_a_machine_with_every_prerequisite_passes_and_this_one_does(tmp_path):
    from harness.install import prerequisites

    assert _prerequisites(tmp_path) == []
    assert prerequisites.problems("cpu", REPO / ".venv") == [], "this machine installs the cpu variant"
    assert prerequisites.locked_python("cuda13") == "3.11"
    assert 6 * 2**30 < prerequisites.download_bytes("cuda13") < 7 * 2**30, "cuda13 and TensorFlow's CUDA 12 locks"


def test_each_missing_prerequisite_is_one_line_naming_what_to_install(tmp_path):
    (line,) = _prerequisites(tmp_path, python="3.12")
    assert line.startswith("Python 3.11 is needed") and "make PYTHON=python3.11" in line
    (line,) = _prerequisites(tmp_path, has_module=lambda name: name != "ensurepip")
    assert line.endswith("install python3.11-venv")
    (line,) = _prerequisites(tmp_path, which=lambda name: None)
    assert line.startswith("no C compiler") and "build-essential" in line and "CHECK_PREREQUISITES=0" in line
    (line,) = _prerequisites(tmp_path, headers=tmp_path / "Python.h")
    assert line.startswith("no Python headers") and "python3.11-dev" in line
    (line,) = _prerequisites(tmp_path, free_bytes=lambda path: 2**30)
    assert line.startswith("1.0 GiB free at ") and "the cuda13 variant downloads 6." in line


def test_prerequisites_come_before_any_download_and_a_bad_variant_is_named(tmp_path):
    proc = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cuda13")
    lines = proc.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if "harness.install.prerequisites cuda13" in line)
    assert check < next(i for i, line in enumerate(lines) if "-m venv" in line or "pip install" in line)
    skipped = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cuda13", "CHECK_PREREQUISITES=0")
    assert "harness.install.prerequisites" not in skipped.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "harness.install.prerequisites", "cuda11"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "error: variant 'cuda11': valid: cpu, cuda12, cuda13"


@pytest.mark.workers
def test_gpu_check_writes_a_failed_install_into_its_folder(tmp_path):
    """The first GPU user's one command: an install that stops still leaves its folder to send."""
    out = tmp_path / "gpu-check"
    stand_in = "python3 -c 'import sys; sys.exit(\"error: no python3.11 here (a stand-in)\")'"
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "gpu-check",
            "VARIANT=cpu",
            f"VENV={tmp_path / 'venv'}",
            f"GPU_CHECK={out}",
            f"PYTHON={stand_in}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# make gpu-check: make install failed")
    assert "It said: error: no python3.11 here (a stand-in)" in summary
    assert "error: no python3.11 here" in (out / "install.log").read_text()
    assert not (tmp_path / "venv").exists(), "nothing was installed"


@pytest.mark.workers
def test_the_builds_read_from_the_frameworks_files_are_what_their_apis_say():
    """framework_builds reads each framework's generated build module without importing it; in a
    process that imports both, it equals torch.version.cuda and tf.sysconfig.get_build_info()."""
    code = (
        "import json, torch, tensorflow as tf\n"
        "from harness.install import builds\n"
        "info = tf.sysconfig.get_build_info()\n"
        "api = {'torch': torch.version.cuda,\n"
        "       'tensorflow': info.get('cuda_version') if info.get('is_cuda_build') else None}\n"
        "print(json.dumps([builds.framework_builds(), api]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from_files, from_apis = json.loads(proc.stdout.strip().splitlines()[-1])
    assert from_files == from_apis and set(from_files) == {"torch", "tensorflow"}

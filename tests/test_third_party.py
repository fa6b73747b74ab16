"""A package outside this repository registers an adapter through the entry-point group."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap

from harness import records
from tests.conftest import REPO
from tests.test_guide import example_adapter

ADAPTER = example_adapter()  # the guide's own example, so the guide cannot drift from what works

# A second plugin whose framework is missing: listed as unavailable with its own install command.
GHOST = """
from adapters import kit


class Ghost(kit.Adapter):
    name, framework, graph = "ghost-plugin", "ghost", "static"
    requires = ("surely_not_installed_xyz",)
    install_hint = "pip install 'dlcompare-numpy-ref[ghost]'"

    def version(self): ...
    def resolve_device(self, device): ...
    def setup(self, spec, params, device, options): ...
    def to_device(self, batch): ...
    def train_step(self, batch): ...
    def sync(self, handle): ...
    def params(self): ...
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "dlcompare-numpy-ref"
version = "0.1"

[project.entry-points."dlcompare.adapters"]
numpy-ref = "dlc_numpy_ref"
ghost-plugin = "dlc_ghost"

[tool.setuptools]
py-modules = ["dlc_numpy_ref", "dlc_ghost"]
"""


def test_an_installed_package_adds_an_adapter(python, tmp_path):
    pkg, site = tmp_path / "pkg", tmp_path / "site"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "dlc_numpy_ref.py").write_text(ADAPTER)
    (pkg / "dlc_ghost.py").write_text(GHOST)
    install = [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(site),
        str(pkg),
    ]
    subprocess.run(install, check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(site))

    def harness(*args):
        return subprocess.run([python, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True, text=True)

    listed = harness("list")
    line = next(line for line in listed.stdout.splitlines() if line.startswith("numpy-ref"))
    assert "entry point of dlcompare-numpy-ref 0.1" in line and "available" in line
    ghost = next(line for line in listed.stdout.splitlines() if line.startswith("ghost-plugin"))
    assert "surely_not_installed_xyz not installed: pip install 'dlcompare-numpy-ref[ghost]'" in ghost
    run = harness(
        "bench", "--framework", "numpy", "--workload", "mlp", "--device", "cpu", "--data", "resident",
        "--set", "num_batches=2", "--rounds", "1", "--out", str(tmp_path / "out"), "--run-id", "r",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (rec,) = records.load(tmp_path / "out" / "r" / records.RESULTS)
    assert rec["adapter"] == "numpy-ref" and rec["status"] == "ok" and rec["loss_last"] < rec["loss_first"]
    checked = harness("check", "numpy-ref", "--workload", "mlp")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS  numpy-ref / mlp: step-0 loss" in checked.stdout
    assert "numpy-ref: all checks passed" in checked.stdout
    # The suite with the plugins installed: discovery's tests, and the conformance suite on the
    # plugin (the built-in adapters' conformance is the same code, run by the suite itself).
    suite = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_discovery.py",
             "tests/test_conformance.py", "-k", "test_discovery or numpy-ref or ghost-plugin"]  # fmt: skip
    tests = subprocess.run(suite, cwd=REPO, env=env, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout[-3000:]
    for workload in ("mlp", "mlp-wide"):  # SGD and Adam, both the workloads' own update
        assert re.search(rf"test_params_after_updates_match_reference\[numpy-ref-cpu-{workload}\] PASSED", tests.stdout)
    assert re.search(r"test_discovery.py::\w+ PASSED", tests.stdout)

"""A package outside this repository registers an adapter through the entry-point group."""

from __future__ import annotations

import os
import subprocess
import textwrap

from harness import records
from tests.conftest import REPO

ADAPTER = '''
"""A third-party adapter: NumPy float64 training of the MLP workloads."""
import numpy as np

from adapters.base import Adapter


class NumpyReference(Adapter):
    name = "numpy-ref"
    framework = "numpy"
    graph = "dynamic"
    requires = ("numpy",)
    extra = "numpy"
    families = ("mlp",)

    def version(self):
        return {"numpy": np.__version__}

    def resolve_device(self, device):
        return "cpu"

    def setup(self, spec, params, device, options):
        self.spec, self.p = spec, {k: v.astype(np.float64) for k, v in params.items()}

    def to_device(self, batch):
        return batch

    def train_step(self, batch):
        loss, grads = self.spec.reference_loss_and_grads(self.p, batch)
        for k in self.p:
            self.p[k] -= self.spec.learning_rate * grads[k]
        return loss

    def sync(self, handle):
        return float(handle)

    def params(self):
        return {k: v.astype(np.float32) for k, v in self.p.items()}
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "dlcompare-numpy-ref"
version = "0.1"

[project.entry-points."dlcompare.adapters"]
numpy-ref = "dlc_numpy_ref"

[tool.setuptools]
py-modules = ["dlc_numpy_ref"]
"""


def test_an_installed_package_adds_an_adapter(python, tmp_path):
    pkg, site = tmp_path / "pkg", tmp_path / "site"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "dlc_numpy_ref.py").write_text(ADAPTER)
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

"""A Keras 3 model file as a workload (workloads/model_file.py) and its backends' parity
(harness/checks/backends.py): the file's faults as one line and exit 2, weights and batches the
same in every process, the parity rule on known answers, and real runs on the Keras backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import records
from harness.checks import backends
from tests.conftest import REPO
from workloads import SpecError, get_workload, model_file

GOOD = """
import keras
import numpy as np

OPTIMIZER = "sgd"
LEARNING_RATE = 0.05


def build():
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(8, activation="relu")(inputs)))


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch_size, 4)).astype("float32"), rng.integers(0, 3, batch_size)
"""

FAULTS = {
    "does not import": "import keras\nraise RuntimeError('broken on purpose')\n",
    "defines no build()": GOOD.replace("def build():", "def made():"),
    "defines no data()": GOOD.replace("def data(", "def batches("),
    "build() fails": GOOD.replace("inputs = keras.Input((4,))", "inputs = keras.Input((4,)); 1 / 0"),
    "not a keras.Model": GOOD.replace("    inputs = keras.Input((4,))\n    return", "    return 'model'\n    return"),
    "the model rejects data()'s inputs of shape (32, 5)": GOOD.replace("(batch_size, 4)", "(batch_size, 5)"),
    "gave 16 inputs and 32 targets": GOOD.replace("standard_normal((batch_size, 4))", "standard_normal((16, 4))"),
    "OPTIMIZER 'lion' is not one of: sgd, adam, adamw": GOOD.replace('"sgd"', '"lion"'),
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCOMPARE_CACHE", str(tmp_path / "cache"))


@pytest.mark.workers  # each file is described in a child process on Keras's NumPy backend
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_of_a_model_file_is_one_line_naming_it(tmp_path, fault):
    path = tmp_path / "model.py"
    path.write_text(FAULTS[fault])
    with pytest.raises(SpecError) as raised:
        model_file.from_file(str(path))
    message = str(raised.value)
    assert fault in message and "\n" not in message and str(path) in message


def test_a_missing_file_and_an_unknown_workload_name_the_valid_ones(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        model_file.from_file(str(tmp_path / "absent.py"))
    with pytest.raises(SpecError, match=r"valid: mlp, .*or a Keras model file \(a \.py path\)"):
        get_workload("no-such-workload")


@pytest.mark.workers
def test_the_cli_exits_2_with_the_files_fault_before_anything_runs(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(FAULTS["defines no data()"])
    cmd = [sys.executable, "-m", "harness", "bench", "--model", str(path), "--out", str(tmp_path / "runs")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr
    assert "defines no data()" in proc.stderr and not (tmp_path / "runs").exists()


@pytest.mark.workers
def test_weights_and_batches_are_the_files_own_and_the_same_in_every_process(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(GOOD)
    spec = model_file.from_file(str(path))
    assert (spec.optimizer, spec.learning_rate, spec.batch_size) == ("sgd", 0.05, 32)
    assert spec.param_count() == 4 * 8 + 8 + 8 * 3 + 3
    params = spec.init_params()
    assert [k.split(":")[0] for k in params] == ["000", "001", "002", "003"]
    assert [v.shape for v in params.values()] == [(4, 8), (8,), (8, 3), (3,)]
    assert np.any(next(iter(params.values())) != 0)  # Keras's own initialiser drew the first kernel
    # a fresh process (a worker) reads the same numbers; another seed draws others
    probe = (
        "import sys, json; from workloads import model_file\n"
        f"s = model_file.from_file({str(path)!r})\n"
        "print(json.dumps([float(v.sum()) for v in s.init_params().values()] + [float(s.batches()[3]['x'].sum())]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    here = [float(v.sum()) for v in params.values()] + [float(spec.batches()[3]["x"].sum())]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here
    other = model_file.ModelFile(name=spec.name, path=spec.path, seed=1, optimizer="sgd", learning_rate=0.05)
    assert float(next(iter(other.init_params().values())).sum()) != here[0]


def _runs(factors: dict[str, float], noise: float = 1e-7, steps: int = 5) -> dict:
    """Check results of backends training one tensor by plain gradient steps, each with its own
    learning-rate factor, plus rounding-size noise; the second run starts one ulp away."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal(50).astype(np.float32)
    grads = [rng.standard_normal(50) for _ in range(steps)]

    def train(factor: float, shift: float, seed: int) -> dict:
        jitter = np.random.default_rng(seed)
        p = start.astype(np.float64) + shift
        out = {"param0:w": p.astype(np.float32), "losses": []}
        for t, g in enumerate(grads):
            out["losses"].append(1.0 + 0.1 * t + jitter.normal() * noise)
            p = p - 0.01 * factor * g * (1 + jitter.normal(size=50) * noise)
            out[f"param{t + 1}:w"] = p.astype(np.float32)
        out["losses"] = np.asarray(out["losses"])
        return out

    return {n: (train(f, 0.0, i), train(f, 1e-7, 100 + i)) for i, (n, f) in enumerate(factors.items())}


def test_parity_passes_backends_that_differ_by_rounding_and_names_the_one_that_does_not():
    same = backends.judge(_runs({"keras-jax": 1.0, "keras-tf": 1.0, "keras-torch": 1.0}))
    assert same == {"keras-jax": None, "keras-tf": None, "keras-torch": None}
    off = backends.judge(_runs({"keras-jax": 1.0, "keras-tf": 1.0, "keras-torch": 1.01}))
    assert off["keras-jax"] is None and off["keras-tf"] is None
    assert off["keras-torch"].startswith("backend parity: differs from the median of 3 Keras backends: w after step")
    assert "allowed" in off["keras-torch"]
    # two that disagree: the median is their mean, neither can be trusted
    pair = backends.judge(_runs({"keras-jax": 1.0, "keras-torch": 1.05}))
    assert all(reason for reason in pair.values())
    assert backends.judge(_runs({"keras-jax": 1.0})) == {"keras-jax": None}


@pytest.mark.frameworks
@pytest.mark.workers
def test_a_model_file_benches_on_every_keras_backend_and_a_wrong_backend_is_failed_untimed(tmp_path):
    """examples/residual_cnn.py on keras-jax, keras-tf and keras-torch, beside a keras-torch whose
    learning rate is 5% high: parity fails that one alone, before it is timed; the others run."""
    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="tests.fault_keras")
    cmd = [sys.executable, "-m", "harness", "bench", "--model", "examples/residual_cnn.py", "--profile", "quick"]
    cmd += ["--framework", "keras,fault-keras-lr", "--rounds", "1", "--out", str(tmp_path), "--run-id", "r"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = {r["adapter"]: r for r in records.load(tmp_path / "r" / records.RESULTS)}
    assert recs["fault-keras-lr"]["status"] == "failed"
    assert recs["fault-keras-lr"]["reason"].startswith("backend parity: differs from the median of 4 Keras backends")
    assert "steps" not in recs["fault-keras-lr"] or not recs["fault-keras-lr"].get("steps")
    for name in ("keras-jax", "keras-tf", "keras-torch"):
        assert recs[name]["status"] == "ok", recs[name].get("reason")
        assert recs[name]["workload"] == "examples/residual_cnn.py"
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## examples/residual_cnn.py (19,850 parameters" in report

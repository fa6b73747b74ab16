"""A Keras 3 model file as a workload (workloads/model_file.py) and its backends' parity
(harness/checks/backends.py): the file's faults as one line and exit 2, weights and batches the
same in every process, several inputs and outputs and batches of varying shape, a layer that
calls one framework directly (skipped on the other backends), a model too large to build (failed
cells), the parity rule on known answers and as the report states it, and real runs on the Keras
backends."""

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
from tests.fakes import report_text
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
    "OPTIMIZER 'lion' is not one of: sgd, adam, adamw": GOOD.replace('"sgd"', '"lion"'),
    "batch 0 has 16 and 32 rows in its inputs and targets, not 32": GOOD.replace(
        "standard_normal((batch_size, 4))", "standard_normal((16, 4))"
    ),
    "yielded fewer than the 8 batches a run takes": GOOD.replace("    return rng.standard", "    yield rng.standard"),
}

#: Two named inputs (one a token sequence whose length changes from batch to batch), two outputs
#: with a loss each, batches from a generator.
MULTI = """
import keras
import numpy as np

BATCH_SIZE = 8
LOSS = [keras.losses.SparseCategoricalCrossentropy(from_logits=True), "mse"]


def build():
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    meta = keras.Input((3,), name="meta")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(40, 8)(tokens))
    hidden = keras.layers.Dense(12, activation="tanh")(keras.layers.Concatenate()([pooled, meta]))
    return keras.Model({"tokens": tokens, "meta": meta}, [keras.layers.Dense(3)(hidden), keras.layers.Dense(1)(hidden)])


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    while True:
        length = int(rng.choice([4, 7, 11]))
        inputs = {"tokens": rng.integers(1, 40, (batch_size, length)).astype("int32"),
                  "meta": rng.standard_normal((batch_size, 3)).astype("float32")}
        yield inputs, (rng.integers(0, 3, batch_size), rng.standard_normal((batch_size, 1)).astype("float32"))
"""

#: A layer written against PyTorch: it builds on Keras's torch backend only.
TORCH_LAYER = """
import keras
import numpy as np
import torch


class TorchGelu(keras.layers.Layer):
    def call(self, x):
        return torch.nn.functional.gelu(x)


def build():
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(3)(TorchGelu(name="torch_gelu")(keras.layers.Dense(8)(inputs))))


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch_size, 4)).astype("float32"), rng.integers(0, 3, batch_size)
"""

#: An embedding table of 10^14 numbers: more than any address space holds, so no backend builds it.
TOO_LARGE = """
import keras
import numpy as np


def build():
    tokens = keras.Input((4,), dtype="int32")
    return keras.Model(tokens, keras.layers.Embedding(10_000_000, 10_000_000)(tokens))


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 100, (batch_size, 4)).astype("int32"), rng.integers(0, 3, (batch_size, 4))
"""


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
    report = report_text(tmp_path / "r")
    assert "## examples/residual_cnn.py (19,850 parameters" in report
    assert "Backend parity, checked before anything was timed" in report
    assert "keras-jax, keras-tf and keras-torch agree" in report
    assert "fault-keras-lr failed it and was not timed: backend parity: differs" in report
    assert "A model file's work is counted from one forward pass on Keras's NumPy backend" in report
    spec = get_workload("examples/residual_cnn.py")
    for name in ("keras-jax", "keras-tf", "keras-torch"):  # the counted step's FLOPs and kernel floor
        assert recs[name]["flops_per_step"] == spec.flops(spec.batches()[0]) > 1e9
        assert recs[name]["kernel_floor_s"] > 0


@pytest.mark.workers
def test_several_inputs_and_outputs_and_generated_batches_of_varying_shape_keep_their_structure(tmp_path):
    path = tmp_path / "multi.py"
    path.write_text(MULTI)
    spec = model_file.from_file(str(path))
    batches = spec.batches()
    assert len(batches) == 8 and len({b["x:tokens"].shape for b in batches}) > 1  # lengths vary
    assert set(batches[0]) == {"x:tokens", "x:meta", "y:0", "y:1"}
    inputs, targets = spec.inputs(batches[2]), spec.targets(batches[2])
    assert set(inputs) == {"tokens", "meta"} and inputs["meta"].shape == (8, 3)
    assert isinstance(targets, list) and [t.shape for t in targets] == [(8,), (8, 1)]
    assert spec.sample_inputs()["tokens"].shape[0] == 2
    loss = json.loads(spec.loss)
    assert loss[0]["class_name"] == "SparseCategoricalCrossentropy" and loss[1] == "mse"
    # every block of such a workload holds whole passes, as for the caption workloads
    assert spec.steps_differ(batches) and not spec.steps_differ([batches[0], dict(batches[0])])


@pytest.mark.frameworks
@pytest.mark.workers
def test_the_three_keras_backends_agree_on_a_multi_input_multi_output_dynamic_model(tmp_path):
    """Parity on MULTI with the real workers (each backend retraces per sequence length)."""
    from adapters import discover
    from harness.running import plan

    path = tmp_path / "multi.py"
    path.write_text(MULTI)
    adapters = discover()
    keras_names = [n for n in ("keras-jax", "keras-tf", "keras-torch") if adapters[n].available]
    if len(keras_names) < 2:
        pytest.skip("fewer than two Keras backends installed")
    cells = plan.plan(adapters, ",".join(keras_names), str(path), "cpu", [], "quick", 1, "t")
    outcomes = backends.run_parity(adapters, cells, 600)
    for cell in cells:
        got = outcomes[cell["cell_id"]]
        assert got["reason"] is None, (cell["adapter"], got)
        assert 0 <= got["of_allowance"] <= 1


@pytest.mark.frameworks
@pytest.mark.workers
def test_a_layer_calling_one_framework_is_skipped_on_the_other_backends_naming_the_layer(tmp_path):
    from adapters import discover

    path = tmp_path / "torch_layer.py"
    path.write_text(TORCH_LAYER)
    spec = model_file.from_file(str(path))  # described on the torch backend, where it builds
    assert spec.described()["settings"]["described_on"] == "torch"
    assert spec.param_count() == 4 * 8 + 8 + 8 * 3 + 3
    adapters = discover()
    assert adapters["keras-torch"].cls().supports(spec) is None
    for name, backend in (("keras-jax", "jax"), ("keras-tf", "tensorflow")):
        if not adapters[name].available:
            continue
        reason = adapters[name].cls().supports(spec)
        assert reason.startswith(f"the model does not build on Keras's {backend} backend (it does on another)")
        assert "in layer 'torch_gelu' (TorchGelu)" in reason and "\n" not in reason
    # parity with one backend left: nothing to hold it to, said so, nothing trained or failed
    from harness.reporting import parity
    from harness.running import plan

    cells = plan.plan(adapters, "keras-jax,keras-tf,keras-torch", str(path), "cpu", [], "quick", 1, "t")
    results = tmp_path / "run" / records.RESULTS
    results.parent.mkdir()
    backends.check_model_files(adapters, cells, results, 60)
    assert not results.exists()  # no cell failed (the skipped ones are the rounds' to record)
    kept = parity.load([results.parent])
    assert list(kept[spec.name]) == ["keras-torch"] and kept[spec.name]["keras-torch"]["of_allowance"] is None
    line = parity.note(spec.name, kept)[0]
    assert line.startswith("Backend parity: keras-torch is the only Keras backend that runs this model here")


@pytest.mark.workers
def test_a_model_too_large_to_build_is_a_failed_cell_on_every_backend_naming_what_it_asked(tmp_path):
    from adapters import discover
    from harness.running import plan

    path = tmp_path / "too_large.py"
    path.write_text(TOO_LARGE)
    spec = model_file.from_file(str(path))  # the data are fine: the run plans, then fails its cells
    assert "more memory than this machine has" in spec.too_large() and "TiB" in spec.too_large()
    adapters = discover()
    cells = plan.plan(adapters, "keras-jax,keras-tf,keras-torch", str(path), "cpu", [], "quick", 1, "t")
    results = tmp_path / "run" / records.RESULTS
    results.parent.mkdir()
    backends.check_model_files(adapters, cells, results, 60)
    failed = {r["adapter"]: r for r in records.load(results)}
    assert set(failed) == {c["adapter"] for c in cells}
    for rec in failed.values():
        assert (
            rec["status"] == "failed"
            and "Unable to allocate" in rec["reason"]
            and "(10000000, 10000000)" in rec["reason"]
        )
    assert not (results.parent / records.PARITY).exists()  # nothing was trained


def test_the_report_states_a_parity_that_passed_and_one_that_failed(tmp_path):
    from harness.reporting import parity

    rule = {"steps": 5, "factor": 10.0, "floor_ulps": 256}
    kept = {
        "m.py": {
            "keras-jax": {"ok": True, "reason": None, "of_allowance": 0.031, "where": "w after step 2", **rule},
            "keras-tf": {"ok": True, "reason": None, "of_allowance": 0.12, "where": "k after step 3", **rule},
            "keras-torch": {"ok": False, "reason": "backend parity: differs", "of_allowance": 3.0, "where": "", **rule},
        }
    }
    (tmp_path / records.PARITY).write_text(json.dumps(kept))
    loaded = parity.load([tmp_path])
    line = parity.note("m.py", loaded)[0]
    assert "over 5 training steps" in line and "10 times the float32 rounding spread" in line
    assert "keras-jax and keras-tf agree; the closest to its allowance, keras-tf, reached 0.12 of it." in line
    table = parity.note("m.py", loaded)[2]  # the numbers the line quotes, and where each backend came closest
    assert "| keras-tf    | agrees            | 0.12 " in table and "k after step 3" in table
    assert "| keras-torch | failed, not timed | 3 " in table
    assert "keras-torch failed it and was not timed: backend parity: differs" in line
    assert parity.note("other.py", loaded) == []
    # the others' workers failed: the one left was held to nothing, and the line says so
    crashed = {"ok": False, "reason": "backend parity: the check's worker failed: boom", "of_allowance": None}
    left = {"ok": True, "reason": None, "of_allowance": 0.0, "where": ""}
    line = parity.note("m.py", {"m.py": {"keras-jax": left | rule, "keras-tf": crashed | {"where": None} | rule}})[0]
    assert "keras-jax trained, with no other backend left to hold it to" in line and "agree" not in line
    assert "keras-tf failed it and was not timed: backend parity: the check's worker failed: boom" in line


#: The built-in cnn written as a model file: its step's kernels must be the ones the cnn states.
CNN_FILE = """
import keras
import numpy as np
from keras import layers


def build():
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
        layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10),
    ])


def data(batch_size, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch_size, 32, 32, 3)).astype("float32"), rng.integers(0, 10, batch_size)
"""


@pytest.mark.workers
@pytest.mark.parametrize(("source", "expected"), [("GOOD", "mlp 4-8-3"), ("CNN_FILE", "cnn")])
def test_a_model_files_step_kernels_are_counted_as_the_built_in_workloads_state_theirs(tmp_path, source, expected):
    """The count from one forward pass (workloads.model_flops) against the analytic kernels of the
    same model: a Dense stack (forward, weight and input gradients, none for the data's input)
    and the built-in cnn (3x3 'same' convolutions in the conv3x3 form the kernel floor times)."""
    from workloads.spec import dense_kernels, kernel_flops

    path = tmp_path / "model.py"
    path.write_text(globals()[source])
    spec = model_file.from_file(str(path))
    batch = spec.batches()[0]
    if expected == "cnn":
        cnn = get_workload("cnn")
        want = cnn.kernels(cnn.batches()[0])
    else:
        want = dense_kernels([4, 8, 3], spec.batch_size)
    assert sorted(spec.kernels(batch), key=str) == sorted(want, key=str)
    assert spec.flops(batch) == sum(kernel_flops(k) * n for k, n in want)


def test_einsum_tensordot_and_strided_convolutions_count_their_multiply_adds():
    """Known answers for the forms a model's layers reach beyond Dense and Conv2D 3x3."""
    from workloads.model_flops import Counter
    from workloads.spec import kernel_flops

    x = np.ones((2, 5, 4))  # a model input: no gradient
    h = np.full((2, 5, 4), 2.0)  # an activation
    w = np.ones((4, 6))

    def flops(counter: Counter) -> int:
        return sum(kernel_flops(k) * n for k, n in counter.kernels.items())

    c = Counter([x])
    c.einsum("bti,io->bto", h, w)  # EinsumDense on an activation: forward, input and weight gradients
    assert flops(c) == 3 * 2 * (2 * 5 * 4 * 6)
    c = Counter([x])
    c.einsum("bqd,bkd->bqk", x, h)  # attention scores; the input needs no gradient
    assert c.kernels == {("matmul", 5, 4, 5): 2, ("matmul", 4, 5, 5): 2}
    c = Counter([x])
    c.tensordot(h, w, 1)
    assert flops(c) == 3 * 2 * (10 * 4 * 6)
    c = Counter([])
    image, kernel = np.ones((1, 8, 8, 3)), np.ones((1, 1, 3, 5))
    c.conv(image, kernel, np.ones((1, 4, 4, 5)), 2, "valid", "channels_last", 1)  # a strided 1x1: im2col
    assert c.kernels == {("matmul", 16, 3, 5): 1, ("matmul", 16, 5, 3): 1, ("matmul", 3, 16, 5): 1}

"""The image input pipelines (``--data loader`` on image workloads): identical batches from every
framework's real pipeline, the wait and CPU measurement, the pipeline settings' planning."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from harness import processes
from harness.measuring import input_pipeline, timing
from harness.reporting import pipelines, plots
from harness.running.plan import PlanError, plan
from tests.conftest import ADAPTERS
from tests.fakes import record
from tests.jax_on_cpu import jax_on_the_cpu
from workloads import get_workload
from workloads.images import AUTOTUNE, PipelineSettings, PipelineSkip, image_dataset

#: Batches compared: 0 and 1 of epoch 0, then 2 (= batch 0's images, epoch 1: new decisions).
COMPARED = 3


@pytest.fixture(scope="module")
def images():
    spec = dataclasses.replace(get_workload("cnn"), batch_size=4, num_batches=2)
    return image_dataset(spec)


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) for m in modules)


def _torch(images, workers):
    import torch

    from adapters._torch_data import image_loader

    loader, _ = image_loader(torch, images, PipelineSettings(workers=workers), cuda=False)
    return ({k: v.numpy() for k, v in b.items()} for b in loader)


def _keras(images, workers):
    # Keras defaults to TensorFlow, absent from .venv on the GPU variants: pick the installed torch.
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    from adapters._keras_data import image_batches

    return image_batches(keras, images, PipelineSettings(workers=workers))[0]


def _tf(images, workers):
    import tensorflow as tf

    from adapters._tf_data import image_dataset as tf_dataset

    dataset, _ = tf_dataset(tf, images, PipelineSettings(workers=workers))
    return ({k: v.numpy() for k, v in b.items()} for b in dataset)


def _grain(images, workers):
    from adapters._grain_data import image_stream

    jax = jax_on_the_cpu()  # before jax.devices: the CPU backend alone, not a GPU's too

    stream, _ = image_stream(jax, images, PipelineSettings(workers=workers), jax.devices("cpu")[0])
    return ({k: np.asarray(v) for k, v in b.items()} for b in stream)


# One multi-worker configuration per pipeline (worker processes are what reorder batches, and
# the expensive part: each starts once); workers=0 runs in the test process.
PIPELINES = [
    ("torch DataLoader", ("torch",), _torch, 2),
    ("keras PyDataset", ("keras",), _keras, 2),
    ("tf.data", ("tensorflow",), _tf, 2),
    ("tf.data sequential", ("tensorflow",), _tf, 0),
    ("grain", ("grain", "jax"), _grain, 2),
]


@pytest.mark.parametrize(("name", "modules", "make", "workers"), PIPELINES, ids=[p[0] for p in PIPELINES])
@pytest.mark.frameworks
def test_every_framework_pipeline_yields_the_reference_batches(images, name, modules, make, workers):
    if not _installed(*modules):
        pytest.skip(f"{', '.join(modules)} not installed")
    reference = [images.batch(k) for k in range(COMPARED)]
    got = list(itertools.islice(make(images, workers), COMPARED))
    for k, (batch, ref) in enumerate(zip(got, reference, strict=True)):
        np.testing.assert_array_equal(batch["x"], ref["x"], err_msg=f"{name}: batch {k} images")
        np.testing.assert_array_equal(batch["y"], ref["y"], err_msg=f"{name}: batch {k} labels")
        assert batch["x"].dtype == np.float32 and batch["x"].shape == (4, 32, 32, 3)
    # Epoch 1 sees the same images as epoch 0 with new crop/flip decisions.
    assert not np.array_equal(reference[0]["x"], reference[2]["x"])
    np.testing.assert_array_equal(reference[0]["y"], reference[2]["y"])


@pytest.mark.frameworks
def test_jax_in_the_test_process_starts_its_cpu_backend_alone():
    """After the Grain pipeline's JAX use (the test above): JAX confined to the CPU, and no backend
    but the CPU's started in this process, so no GPU memory is held for the rest of the session."""
    if not _installed("jax"):
        pytest.skip("jax not installed")
    from jax._src import xla_bridge

    jax = jax_on_the_cpu()
    jax.devices("cpu")
    assert jax.config.jax_platforms == "cpu"
    assert set(xla_bridge._backends) == {"cpu"}


#: A process that registers a stand-in GPU backend (as a CUDA plugin registers its own), then asks
#: JAX for its CPU devices, confined to the CPU or not; it prints the backends started.
STAND_IN_GPU = """
import sys
from jax._src import xla_bridge
started = []
def gpu():
    started.append("gpu")
    raise RuntimeError("the stand-in GPU backend started")
xla_bridge.register_backend_factory("standin", gpu, priority=400)
if sys.argv[1] == "confined":
    from tests.jax_on_cpu import jax_on_the_cpu
    jax = jax_on_the_cpu()
else:
    import jax
jax.devices("cpu")
print(" ".join(started + sorted(xla_bridge._backends)))
"""


@pytest.mark.frameworks
@pytest.mark.parametrize(("how", "started"), [("confined", "cpu"), ("as-jax-defaults", "gpu cpu")])
def test_the_confinement_keeps_a_gpu_backend_from_starting(how, started):
    """The stand-in plays the GPU this machine lacks: unconfined, ``jax.devices("cpu")`` starts it
    too (on a GPU machine, the CUDA backend's 75% of the memory); confined, only the CPU's."""
    if not _installed("jax"):
        pytest.skip("jax not installed")
    proc = subprocess.run(
        [sys.executable, "-c", STAND_IN_GPU, how], env=processes.repo_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == started


def test_decisions_are_a_pure_function_of_seed_epoch_index(images):
    assert images.decisions(3, 1) == images.decisions(3, 1)
    other = dataclasses.replace(images, seed=images.seed + 1)
    assert [images.decisions(e, i) for e in range(4) for i in range(4)] != [
        other.decisions(e, i) for e in range(4) for i in range(4)
    ]


def test_autotune_is_tf_data_only(images):
    if not _installed("torch"):
        pytest.skip("torch not installed")
    import torch

    from adapters._torch_data import image_loader

    with pytest.raises(PipelineSkip, match="AUTOTUNE"):
        image_loader(torch, images, PipelineSettings(workers=AUTOTUNE), cuda=False)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_wait_is_measured_apart_from_the_step_with_a_patched_clock():
    """A stream whose k-th batch takes wait[k] and steps that take 2 ms: the steady window's
    waits are the stream's, and the input-bound share their part of the step time."""
    clock = FakeClock()
    delays = [0.001 * (1 + k % 3) for k in range(10_000)]

    def stream():
        for k in itertools.count():
            clock.now += delays[k]
            yield k

    meter = input_pipeline.WaitMeter(stream(), clock)

    def step(_):
        batch = meter.next()
        clock.now += 0.002
        return batch

    profile = timing.Profile("t", 2, 30, 30, budget_s=1e9, target_rel_iqr=0.0, rounds=1, timeout_s=10)
    m = timing.measure(step, lambda k: float(k), [0], profile, clock=clock, steady=meter, compiles=lambda: 0)
    cold = len(m.cold_times_s)
    assert meter.steady == pytest.approx(delays[cold : cold + 30])
    fields = input_pipeline.wait_fields(meter, m.step_times_s, m.recompile_times_s)
    waits = delays[cold : cold + 30]
    assert fields["input_bound_share"] == pytest.approx(sum(waits) / (sum(waits) + 30 * 0.002))
    assert fields["compute_median_s"] == pytest.approx(0.002)
    assert fields["wait_median_s"] == pytest.approx(float(np.median(waits)))


def test_cpu_meter_splits_the_training_process_from_its_workers():
    clock = FakeClock()
    cpu = {1: 10.0, 2: 5.0, 3: 7.0}

    def proc(pid, kids=()):
        return SimpleNamespace(
            pid=pid,
            create_time=lambda: float(pid),
            children=lambda recursive: list(kids),
            cpu_times=lambda: SimpleNamespace(user=cpu[pid], system=0.0),
        )

    root = proc(1, [proc(2), proc(3)])
    meter = input_pipeline.CpuMeter(clock, root)
    with meter:
        clock.now += 2.0
        cpu[1] += 1.0  # the training process: half a core
        cpu[2] += 2.0  # each worker: one core
        cpu[3] += 2.0
    assert meter.cores == pytest.approx(2.5)
    assert meter.worker_cores == pytest.approx(2.0)


def test_throughput_drains_the_buffer_then_times_the_pipeline_alone():
    clock = FakeClock()
    drawn = []

    def draw():
        clock.now += 0.0 if len(drawn) < 3 else 0.25  # 3 buffered batches, then 4 batches/s
        drawn.append(1)

    assert input_pipeline.throughput(draw, budget_s=2.0, drain=3, clock=clock) == pytest.approx(4.0)


def test_real_pipeline_waits_are_recorded_per_draw(images):
    meter = input_pipeline.WaitMeter(iter(images.batch(k) for k in itertools.count()))
    with meter:
        batches = [meter.next() for _ in range(3)]
    assert len(meter.steady) == 3 and all(w > 0 for w in meter.steady)
    np.testing.assert_array_equal(batches[1]["x"], images.batch(1)["x"])


# --- planning -----------------------------------------------------------------------------


def _plan(**kw):
    args = {"framework": "torch-eager", "workload": "cnn", "device": "cpu", "overrides": [], "data": "loader"}
    args.update(kw)
    return plan(
        ADAPTERS,
        args.pop("framework"),
        args.pop("workload"),
        args.pop("device"),
        args.pop("overrides"),
        "quick",
        2,
        "r",
        **args,
    )


def test_workers_sweep_plans_one_cell_per_value():
    cells = _plan(sweep="workers=0,1,2,autotune")
    assert [c["pipeline"] for c in cells] == [{"workers": 0}, {"workers": 1}, {"workers": 2}, {"workers": -1}]
    assert [c["sweep"] for c in cells] == [{"field": "workers", "value": v} for v in (0.0, 1.0, 2.0, -1.0)]
    assert all(c["overrides"] == [] for c in cells)
    assert len({c["cell_id"] for c in cells}) == 4
    prefetch = _plan(sweep="prefetch=1,4", overrides=["workers=2", "batch_size=64"])
    assert [c["pipeline"] for c in prefetch] == [{"workers": 2, "prefetch": 1}, {"workers": 2, "prefetch": 4}]
    assert prefetch[0]["overrides"] == ["batch_size=64"]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"sweep": "wrkers=0,1"}, "valid: spec fields .*workers, prefetch"),
        ({"sweep": "workers=0,1", "data": "resident"}, "apply to --data loader only"),
        ({"sweep": "workers=0,1", "workload": "rnn-caption"}, "apply to the image workloads"),
        ({"sweep": "workers=0,x"}, "expected an integer"),
        ({"sweep": "prefetch=-1,2"}, "expected an integer >= 0"),
        ({"overrides": ["workers=1.5"]}, "expected an integer"),
    ],
)
def test_bad_pipeline_settings_are_plan_errors(kw, message):
    with pytest.raises(PlanError, match=message):
        _plan(**kw)


# --- the report section -------------------------------------------------------------------


def _pipeline_record(adapter: str, workers: int, step_ms: float, share: float, cores: float) -> dict:
    return record(
        adapter,
        workload="cnn",
        median_ms=step_ms,
        data="loader",
        pipeline={"workers": workers, "prefetch": 2},
        sweep={"field": "workers", "value": float(workers)},
        loader_kind=f"{adapter}'s pipeline",
        pipeline_data={"samples": 512, "stored": "JPEG", "per_sample": "decode"},
        wait_median_s=step_ms * share * 1e-3,
        input_bound_share=share,
        compute_median_s=step_ms * (1 - share) * 1e-3,
        cpu_cores_busy=cores,
        cpu_worker_cores_busy=max(cores - 1, 0.0),
        cpu_count=2,
        pipeline_batches_per_s=1e3 / (step_ms * share + 1),
        pipeline_ceiling_s=(step_ms * share + 1) * 1e-3,
    )


def test_report_section_plots_and_names_the_crossover(tmp_path):
    recs = [
        _pipeline_record("torch-eager", 0, 40.0, 0.7, 1.0),
        _pipeline_record("torch-eager", 1, 30.0, 0.6, 1.6),
        _pipeline_record("torch-eager", 2, 20.0, 0.05, 1.9),
        _pipeline_record("tf-function", 0, 15.0, 0.08, 1.2),
        _pipeline_record("tf-function", 2, 12.0, 0.02, 1.8),
        _pipeline_record("jax-jit", 0, 50.0, 0.8, 1.0),
        _pipeline_record("jax-jit", 2, 45.0, 0.6, 2.0),
        record("keras-jax", workload="cnn", status="skipped", data="loader", reason="no pipeline"),
    ]
    text = "\n".join(pipelines.section(recs, tmp_path, plots.palette(recs)))
    assert "### cnn on cpu: workers" in text
    assert "share the same 2 logical CPUs" in text
    crossing = "stops being input-bound between workers=1 (waits 60% of the step) and workers=2 (5%)"
    assert f"torch-eager's pipeline; {crossing}" in text
    assert "tf-function's pipeline; compute-bound already at workers=0" in text
    assert "jax-jit's pipeline; input-bound at every workers value tried" in text
    assert "| torch-eager | 2         | 20" in text
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "workers" not in line]
    assert rows == ["jax-jit"] * 2 + ["tf-function"] * 2 + ["torch-eager"] * 3, "rows by adapter, not in run order"
    assert (tmp_path / "cnn-cpu-pipeline-workers.png").stat().st_size > 0
    assert pipelines.section([r for r in recs if r["adapter"] == "keras-jax"], tmp_path) == []


def test_rounds_average_the_pipeline_measures_and_pool_the_waits():
    from harness.stats.cells import combine

    rounds = [
        dict(
            _pipeline_record("torch-eager", 2, step_ms, share, cores),
            round=i + 1,
            step_times_s=[step_ms * 1e-3] * 4,
            wait_times_s=[step_ms * share * 1e-3] * 4,
            batch_size=32,
            cold_s=1.0,
        )
        for i, (step_ms, share, cores) in enumerate([(10.0, 0.2, 1.0), (20.0, 0.4, 2.0)])
    ]
    rec = combine(rounds)
    assert rec["input_bound_share"] == pytest.approx(0.3)
    assert rec["cpu_cores_busy"] == pytest.approx(1.5)
    assert rec["wait_times_s"] == pytest.approx([0.002] * 4 + [0.008] * 4)

"""CUDA paths: run only where a GPU is visible; skipped cleanly elsewhere (CI has none)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness.running import runner
from tests.conftest import ADAPTERS, CPU_BUILDS, check_cell
from workloads import get_workload

pytestmark = [
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU on this machine"),
    pytest.mark.frameworks,  # every test runs framework workers on the GPU
]


@pytest.mark.parametrize("name", [n for n, a in ADAPTERS.items() if a.available])
def test_cuda_cell_runs_on_the_gpu_and_matches_the_reference(name, tmp_path):
    info = ADAPTERS[name]
    rec = runner.run_cell(info, check_cell(name, "mlp", "cuda") | {"cell_id": "gpu"}, timeout_s=600)
    if rec["status"] == "skipped" and CPU_BUILDS:
        pytest.skip(rec["reason"])  # e.g. tensorflow-cpu has no CUDA build
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["device"] == "cuda"
    batch = {"cells": [check_cell(name, "mlp", "cuda")]}
    proc = runner.run_worker(info, batch, "check", tmp_path, 600, ["--steps", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = get_workload("mlp")
    ref, _ = spec.reference_train(spec.init_params(), 1)
    np.testing.assert_allclose(np.load(tmp_path / "0.npz")["losses"][0], ref[0], rtol=1e-5)


def test_a_sync_that_does_not_wait_is_caught_on_the_gpu(python, tmp_path):
    """fault-gpu-nosync queues seconds of matmuls and returns from sync at once: the stream query
    after sync must fail the cell instead of recording launch times as step times."""
    import os
    import subprocess

    from harness import records
    from tests.conftest import REPO

    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="tests.fault_adapters")
    cmd = [python, "-m", "harness", "bench", "--out", str(tmp_path), "--run-id", "r", "--profile", "quick"]
    cmd += ["--framework", "fault-gpu-nosync", "--workload", "mlp", "--device", "cuda"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (rec,) = records.load(tmp_path / "r" / records.RESULTS)
    assert rec["status"] == "failed", rec
    assert "still had queued work" in rec["reason"]


PLACEMENT = {
    # adapter: a check run right after to_device, in the adapter's own worker environment
    "torch-eager": "import torch; assert torch.cuda.current_stream().query(), 'to_device returned early'; "
    "assert all(t.is_cuda for t in placed.values())",
    "keras-torch": "import torch; assert torch.cuda.current_stream().query(), 'to_device returned early'; "
    "assert all(t.is_cuda for t in placed.values())",
    "tf-function": "assert all('GPU' in t.device and t.dtype.name != 'int32' for t in placed.values()), "
    "[(t.device, t.dtype.name) for t in placed.values()]",
    "jax-jit": "assert all(d.platform == 'gpu' for a in placed.values() for d in a.devices())",
}
PLACEMENT["keras-tf"] = PLACEMENT["tf-function"]


@pytest.mark.parametrize("name", sorted(PLACEMENT))
@pytest.mark.parametrize("workload", ["mlp", "cnn", "rnn-caption"])
def test_data_is_truly_on_the_gpu_once_to_device_returns(name, workload):
    import os
    import subprocess

    from tests.conftest import REPO

    info = ADAPTERS[name]
    if not info.available:
        pytest.skip(info.unavailable)
    script = (
        f"from adapters import discover; from adapters.base import Options; from workloads import get_workload\n"
        f"a = discover()[{name!r}].cls(); spec = get_workload({workload!r})\n"
        f"a.setup(spec, spec.init_params(), 'cuda', Options(threads=1))\n"
        f"placed = a.to_device(spec.batches()[0])\n{PLACEMENT[name]}\n"
    )
    env = dict(os.environ, **info.cls.worker_env(1, "cuda"))
    python = runner.interpreter(info, {})  # the framework's own environment (TensorFlow: .venv-tf)
    proc = subprocess.run([python, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("name", [n for n, a in ADAPTERS.items() if a.available])
def test_gpu_cells_record_equal_autotune_a_verified_sync_and_their_gpu(name):
    rec = runner.run_cell(ADAPTERS[name], check_cell(name, "cnn", "cuda") | {"cell_id": "gpu"}, timeout_s=600)
    assert rec["status"] == "ok", rec.get("reason")
    settings = rec["settings"]
    autotune = settings.get("cudnn_autotune", settings.get("gpu_autotune_level"))
    assert autotune in (True, "1", 4), settings
    if ADAPTERS[name].framework in ("torch", "jax"):
        assert rec["sync_verified"] is True
    assert rec["gpu_sampled"] and rec["gpu_util_mean"] is not None


def test_each_framework_maps_the_cuda_libraries_of_one_cuda_major():
    """harness.measuring.cuda_libraries after a real step on the GPU, per framework build, each in
    its own environment: one CUDA major per process, and some CUDA library mapped at all."""
    from harness.checks import doctor

    rows = doctor.library_maps(ADAPTERS, 1, [n for n, a in ADAPTERS.items() if a.available])
    assert rows and all(r["verdict"] == "ok" for r in rows), doctor.render_maps(rows)


@pytest.mark.parametrize("name", [n for n in ("torch-eager", "jax-jit", "tf-function") if ADAPTERS[n].available])
def test_a_profiled_gpu_cell_breaks_down_the_device_timeline(name, tmp_path):
    """--profile-ops on a GPU: the breakdown reads the kernels (docs/profiling.md), so it carries the
    device-busy share and the mean gap between kernels, and its categories still sum to the step."""
    cell = check_cell(name, "mlp", "cuda") | {"cell_id": "gpu", "profile_ops": str(tmp_path), "round": 1}
    rec = runner.run_cell(ADAPTERS[name], cell, timeout_s=600)
    if rec["status"] == "skipped":
        pytest.skip(rec["reason"])  # e.g. tensorflow-cpu has no CUDA build
    assert rec["status"] == "ok", rec.get("reason")
    found = rec["ops_profile"]
    assert found["status"] == "ok", found.get("reason")
    assert 0 < found["device_busy_share"] <= 1 and found["kernel_gap_s"] >= 0
    assert found["ops_per_step"] >= 3  # an mlp step launches at least its three forward matmuls
    assert sum(found["shares"].values()) == pytest.approx(1.0)
    assert found["shares"]["matmul/conv"] > 0
    assert (tmp_path / found["trace"]).is_file()


#: The export task's GPU rows (docs/export.md): each framework's program exported for and served on
#: CUDA, and ONNX Runtime's CUDAExecutionProvider serving torch's ONNX graph.
GPU_EXPORTS = [
    ("torch-eager", "torch-export"),
    ("torch-eager", "onnx"),
    ("jax-jit", "jax-export"),
    ("tf-function", "tf-saved-model"),
]


@pytest.fixture(scope="module")
def gpu_exported(tmp_path_factory) -> dict[tuple[str, str], dict]:
    import subprocess
    import sys

    from harness import records
    from tests.conftest import REPO

    out = tmp_path_factory.mktemp("gpu-export")
    names = ",".join(sorted({a for a, _ in GPU_EXPORTS}))
    paths = ",".join(sorted({p for _, p in GPU_EXPORTS}))
    args = ["export", "--device", "cuda", "--workload", "mlp", "--framework", names, "--path", paths]
    args += ["--budget", "0.2", "--batch", "64", "--out", str(out), "--run-id", "gpu"]
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {(r["adapter"], r["export_path"]): r for r in records.load(out / "gpu" / records.RESULTS)}


@pytest.mark.parametrize(("adapter", "path"), GPU_EXPORTS)
def test_exported_programs_serve_on_the_gpu_and_match_the_reference(gpu_exported, adapter, path):
    if not ADAPTERS[adapter].available:
        pytest.skip(ADAPTERS[adapter].unavailable)
    rec = gpu_exported[(adapter, path)]
    no_provider = "has no CUDAExecutionProvider" in rec["reason"]  # the CPU onnxruntime (cuda13 variant)
    if rec["status"] != "ok" and (CPU_BUILDS or no_provider):
        pytest.skip(rec["reason"])
    assert rec["status"] == "ok", rec["reason"]
    assert rec["device_requested"] == "cuda" and rec["parity_error"] <= rec["parity_allowed"]
    assert rec["p50_s"] > 0 and rec["throughput_per_s"] > 0


SIDE_BY_SIDE = ("torch-eager", "jax-jit", "keras-torch", "tf-function")


def side_by_side_generation(device: str, tmp_path) -> list[dict]:
    """Generation 2 of the available SIDE_BY_SIDE adapters on ``device`` with a twin of the first:
    so turns.starts_at_once starts two workers at once (each its own CUDA
    context on one GPU); the records it wrote."""
    from adapters import discover
    from harness import records
    from harness.running import turns
    from harness.running.plan import plan
    from harness.running.progress import MatrixProgress
    from harness.running.sink import RoundSink

    names = [n for n in SIDE_BY_SIDE if ADAPTERS[n].available]
    cells = [{**c, "run_id": "t"} for c in plan(discover(), ",".join(names), "mlp", device, [], "quick", 1, "t")]
    twin = {**cells[0], "cell_id": cells[0]["cell_id"] + "|twin", "adapter": cells[0]["adapter"] + "~twin1"}
    cells.append({**twin, "base_adapter": cells[0]["adapter"]})
    results = tmp_path / records.RESULTS
    sink = RoundSink(results, 2, 600.0, MatrixProgress(len(cells), live=False))
    turns.run_generation(cells, 2, discover(), sink, turns.Turns(0.5, min_turns=3), 1, {}, "g", False)
    return records.load(results)


def test_workers_started_side_by_side_on_one_gpu_get_ready_and_take_their_turns_there(tmp_path):
    """A later generation starts two workers at once (harness.running.turns.starts_at_once): on
    one GPU, every framework's worker still gets ready, takes every turn on cuda, and counts the
    side-by-side start; none is left running."""
    import psutil

    from harness.running import turns

    recs = side_by_side_generation("cuda", tmp_path)
    skipped = [r for r in recs if r["status"] == "skipped"]
    if skipped and CPU_BUILDS:
        pytest.skip(skipped[0]["reason"])
    assert len(recs) >= 3 and all(r["status"] == "ok" for r in recs), [(r["adapter"], r.get("reason")) for r in recs]
    assert all(r["device"] == "cuda" and len(r["turn_ids"]) >= 3 for r in recs)
    assert all(r["starts_at_once"] == turns.starts_at_once(2) == 2 and r["starting_s"] > 0 for r in recs)
    # this process's own children only: other tests of a parallel run (-n 8) keep workers of their own
    leftover = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    assert not [c for c in leftover if "worker serve" in c], leftover

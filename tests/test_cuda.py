"""CUDA paths: run only where a GPU is visible; skipped cleanly elsewhere (CI has none)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness import runner
from tests.conftest import ADAPTERS, check_cell
from workloads import get_workload

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU on this machine")


@pytest.mark.parametrize("name", [n for n, a in ADAPTERS.items() if a.available])
def test_cuda_cell_runs_on_the_gpu_and_matches_the_reference(name, tmp_path):
    info = ADAPTERS[name]
    rec = runner.run_cell(info, check_cell(name, "mlp", "cuda") | {"cell_id": "gpu"}, timeout_s=600)
    if rec["status"] == "skipped":
        pytest.skip(rec["reason"])  # e.g. tensorflow-cpu has no CUDA build
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["device"] == "cuda"
    batch = {"cells": [check_cell(name, "mlp", "cuda")]}
    proc = runner.run_worker(info, batch, "check", tmp_path, 600, ["--steps", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = get_workload("mlp")
    ref, _ = spec.reference_train(spec.init_params(), 1)
    np.testing.assert_allclose(np.load(tmp_path / "0.npz")["losses"][0], ref[0], rtol=1e-5)

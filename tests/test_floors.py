"""Speed of light per cell (harness.measuring.floors): the kernel floor's arithmetic and its measuring
process (real NumPy/PyTorch, in a subprocess: no framework in the pytest process), and how the
report shows a cell against the larger of its two floors."""

from __future__ import annotations

import pytest

from harness.measuring import floors, limits_cache, peak
from harness.reporting.formatting import DASH
from harness.reporting.workload_tables import floor_text
from tests.fakes import record


def test_a_steps_floor_is_its_kernels_times_their_counts_averaged_over_batches():
    a, b = ("matmul", 2, 3, 4), ("conv3x3", 1, 4, 4, 1, 2, "forward")
    seconds = {floors._key(a): 1.0, floors._key(b): 0.5}
    assert floors.floor_s([[(a, 2)], [(a, 1), (b, 4)]], seconds) == pytest.approx((2.0 + 3.0) / 2)
    assert floors.floor_s([[(a, 1), (("matmul", 9, 9, 9), 1)]], seconds) is None, "an unmeasured kernel: no floor"


@pytest.mark.frameworks
def test_every_library_times_every_kernel_kind_and_each_cell_gets_its_floor(monkeypatch):
    """One process per installed library (NumPy, torch, JAX, TensorFlow), real kernels: matmuls
    and every role of a convolution; each cell's floor from the fastest; decoding states none."""
    monkeypatch.delenv(floors.LIBRARIES_ENV, raising=False)  # the suite's other runs time two (conftest)
    cells = [
        {"cell_id": "m", "workload": "mlp", "overrides": ["batch_size=8", "num_batches=2"], "device_requested": "cpu"},
        {"cell_id": "c", "workload": "cnn", "overrides": ["batch_size=2", "num_batches=1"], "device_requested": "cpu"},
        {"cell_id": "d", "workload": "rnn-decode", "overrides": ["num_batches=2"], "device_requested": "cpu"},
    ]
    found = floors.kernel_floors(cells, ["cpu"], threads=1, precision="fp32")
    assert found["errors"] == {} and found["left_out"] == []
    spec_kernels = {tuple(k) for c in cells[:2] for b in floors.cell_kernels(c) for k, _ in b}
    assert found["kernels"] == len(spec_kernels)
    assert sum(found["fastest_library"]["cpu"].values()) == len(spec_kernels), "every kernel was timed by some library"
    assert 0 < found["floors"]["m"] < found["floors"]["c"] < 1 and found["floors"]["d"] is None


def test_floor_libraries_the_environment_leaves_out_are_not_timed_and_a_bad_name_is_refused(monkeypatch):
    timed = []

    def run_library(library, device, shapes, threads, precision):
        timed.append(library)
        return {"seconds": {floors._key(s): 1e-3 for s in shapes}}

    monkeypatch.setattr(floors, "_run_library", run_library)
    monkeypatch.setattr(floors, "_installed", lambda library, device="cpu": True)
    monkeypatch.setattr(floors, "plugin_kernels", dict)
    monkeypatch.delenv(limits_cache.ENV, raising=False)
    cell = {"cell_id": "m", "workload": "mlp", "overrides": ["num_batches=1"], "device_requested": "cpu"}
    monkeypatch.setenv(floors.LIBRARIES_ENV, "torch, numpy")
    found = floors.kernel_floors([cell], ["cpu"], threads=1, precision="fp32")
    assert timed == ["numpy", "torch"] and found["left_out"] == ["jax", "tensorflow"]
    assert found["floors"]["m"] > 0
    for bad in ("torch,pytorch", ""):
        monkeypatch.setenv(floors.LIBRARIES_ENV, bad)
        with pytest.raises(ValueError, match="valid: numpy, torch, jax, tensorflow") as err:
            floors.kernel_floors([cell], ["cpu"], threads=1, precision="fp32")
        assert repr(bad) in str(err.value) and ("'pytorch'" in str(err.value) or not bad)
    from harness import cli  # a bench refuses it before it measures anything

    monkeypatch.setenv(floors.LIBRARIES_ENV, "torch,pytorch")
    monkeypatch.setattr(floors, "kernel_floors", lambda *a: pytest.fail("the bench went on to measure"))
    assert cli.main(["bench", "--framework", "torch-eager", "--workload", "mlp", "--out", "/nonexistent/x"]) == 2


def test_the_report_names_the_larger_floor():
    assert floor_text(record("a", median_ms=4.0, kernel_floor_s=2e-3, dispatch_floor_s=1e-3)) == "2.0x kernels"
    assert floor_text(record("a", median_ms=4.0, kernel_floor_s=1e-4, dispatch_floor_s=5e-4)) == "8.0x dispatch"
    assert floor_text(record("a", median_ms=4.0, kernel_floor_s=None)) == DASH, "no floor measured: a dash"


def test_the_run_keeps_the_better_peak_of_its_start_and_end():
    start = {"cpu": {"matmul_gflops": 100.0, "copy_gbs": 20.0, "matmul_gflops_by": {"numpy": 100.0}}}
    end = {"cpu": {"matmul_gflops": 150.0, "copy_gbs": 10.0, "matmul_gflops_by": {"torch": 150.0}}}
    merged = peak.best_of(start, end)["cpu"]
    assert merged["matmul_gflops"] == 150.0 and merged["copy_gbs"] == 20.0
    assert merged["matmul_gflops_by"] == {"torch": 150.0}
    assert (merged["matmul_gflops_start"], merged["matmul_gflops_end"]) == (100.0, 150.0)
    failed = peak.best_of(start, {"cpu": {"error": "no torch"}})["cpu"]
    assert failed == start["cpu"], "a failed re-measurement keeps the first"


def test_the_session_cache_measures_only_kernels_no_earlier_run_measured(tmp_path, monkeypatch):
    asked = []

    def measure(names):
        asked.append(list(names))
        return {"error": "no library"} if "bad" in names else {"seconds": {n: float(len(n)) for n in names}}

    key = {"floors": "numpy", "device": "cpu", "threads": 1, "precision": "fp32"}
    monkeypatch.delenv(limits_cache.ENV, raising=False)
    assert limits_cache.cached_each(key, ["a", "bb"], measure, "seconds") == {"seconds": {"a": 1.0, "bb": 2.0}}
    monkeypatch.setenv(limits_cache.ENV, str(tmp_path))
    limits_cache.cached_each(key, ["a", "bb"], measure, "seconds")
    assert limits_cache.cached_each(key, ["bb", "ccc"], measure, "seconds") == {"seconds": {"bb": 2.0, "ccc": 3.0}}
    assert limits_cache.cached_each({**key, "threads": 2}, ["a"], measure, "seconds") == {"seconds": {"a": 1.0}}
    assert asked == [["a", "bb"], ["a", "bb"], ["ccc"], ["a"]], "each kernel measured once per set of inputs"
    assert limits_cache.cached_each(key, ["a", "bad"], measure, "seconds") == {"error": "no library"}
    assert limits_cache.cached_each(key, ["bad"], measure, "seconds") == {"error": "no library"}
    assert asked[-2:] == [["bad"], ["bad"]], "a failure is never stored: the next run measures again"


def test_a_calibration_cell_measures_no_dispatch_floor():
    from types import SimpleNamespace

    from harness.running import cell_work

    def tiny():
        raise AssertionError("a cell planned without floors never builds the floor's workload")

    spec = SimpleNamespace(tiny=tiny)
    assert cell_work.dispatch_floor({"round": 1, "floors": False}, spec, "cpu") == {}
    # (which generation times a bench cell's floor is its caller's choice: test_turns, test_cli)


def test_a_library_in_its_own_environment_is_timed_there(monkeypatch):
    """On the GPU variants TensorFlow lives in .venv-tf, absent from the bench's environment: its
    kernel floors are still timed, by that environment's interpreter."""
    import importlib.util

    from harness.measuring import floors

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    monkeypatch.setattr(
        floors, "family_python", lambda lib, *a: "/opt/venv-tf/bin/python" if lib == "tensorflow" else None
    )
    assert floors._installed("tensorflow")
    assert not floors._installed("no-such-library")

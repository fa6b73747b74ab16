"""The GPU's own figures in a report, from stand-in records and peaks (this machine has no GPU):
the host-to-device peak beside each cell's placement of a batch, and the peaks' start/end merge."""

from __future__ import annotations

import pytest

from harness.measuring import peak
from harness.reporting import hardware
from tests.fakes import record

GPU_PEAK = {
    "matmul_gflops": 48689.0,
    "matmul_gflops_by": "torch",
    "copy_gbs": 3989.0,
    "h2d_gbs": 50.0,
    "h2d_pageable_gbs": 20.0,
}
ENV = {"peaks": {"cuda": GPU_PEAK}}


def _placed(adapter: str, mib: float, ms: float, device: str = "cuda") -> dict:
    return record(adapter, device=device, device_requested=device, batch_bytes=int(mib * 2**20), to_device_s=ms / 1e3)


def test_each_gpu_cells_placement_is_a_rate_beside_the_measured_host_to_device_peak():
    recs = [_placed("torch-eager", 25.0, 1.0), _placed("jax-jit", 25.0, 5.0), _placed("numpy-ish", 25.0, 1.0, "cpu")]
    lines = hardware.placement(recs, {"": ENV})
    assert "the measured host-to-device peak, 50 GB/s (pinned memory)" in lines[0]
    rows = {cells[0]: cells[4:] for cells in _rows(lines[2])}
    assert rows == {"torch-eager": ["25", "1", "26.2", "52%"], "jax-jit": ["25", "5", "5.24", "10%"]}, rows
    # the CPU cell has no bus to cross
    assert hardware.placement([recs[2]], {"": ENV}) == []


def test_without_a_measured_peak_the_placement_says_so_rather_than_a_share():
    (intro, _, table, _) = hardware.placement([_placed("torch-eager", 25.0, 1.0)], {"": {"peaks": {"cuda": {}}}})
    assert "no host-to-device peak" in intro
    assert [cells[-2:] for cells in _rows(table)] == [["26.2", "—"]]


def _rows(table: str) -> list[list[str]]:
    """A markdown table's body rows as lists of cell texts."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_the_peaks_table_gives_the_host_to_device_rates_where_measured():
    (row,) = hardware._peak_rows("", {"cuda": GPU_PEAK})
    assert row[-1] == "50 pinned, 20 pageable"
    (cpu,) = hardware._peak_rows("", {"cpu": {"matmul_gflops": 300.0, "matmul_gflops_by": "numpy", "copy_gbs": 20.0}})
    assert cpu[-1] == "—"
    text = "\n".join(hardware.hardware([], ENV))
    assert "host to device GB/s" in text
    cpu_only = {"peaks": {"cpu": {"matmul_gflops": 300.0, "matmul_gflops_by": "numpy", "copy_gbs": 20.0}}}
    assert "host to device" not in "\n".join(hardware.hardware([], cpu_only)), "no column of dashes"


def test_the_better_of_start_and_end_counts_for_the_host_to_device_copy_too():
    start = {"cuda": {**GPU_PEAK, "h2d_gbs": 40.0}}
    end = {"cuda": {**GPU_PEAK, "h2d_gbs": 50.0, "h2d_pageable_gbs": 18.0}}
    merged = peak.best_of(start, end)["cuda"]
    assert (merged["h2d_gbs"], merged["h2d_gbs_start"], merged["h2d_gbs_end"]) == (50.0, 40.0, 50.0)
    assert merged["h2d_pageable_gbs"] == 20.0
    cpu_peak = {"matmul_gflops": 1.0, "matmul_gflops_by": "numpy", "copy_gbs": 2.0}
    cpu = peak.best_of({"cpu": cpu_peak}, {"cpu": {**cpu_peak, "matmul_gflops": 1.5}})
    assert "h2d_gbs" not in cpu["cpu"], "no host-to-device figure where none was measured"


def test_the_first_pages_machine_line_quotes_the_host_to_device_peak(tmp_path):
    import json

    from harness import records
    from harness.reporting import report
    from tests.fakes import as_rounds

    run = tmp_path / "run"
    run.mkdir()
    for r in (_placed("torch-eager", 25.0, 1.0), _placed("jax-jit", 25.0, 5.0)):
        for p in as_rounds({**r, "cell_id": r["adapter"]}):
            records.append(run / records.RESULTS, p)
    (run / records.ENV).write_text(json.dumps({**ENV, "hostname": "box", "gpus": []}))
    report.write(run)
    first = (run / "report.md").read_text()
    assert "cuda float32 matmul peak 48,689 GFLOP/s, host to device 50 GB/s" in first
    assert "Placing one batch on the GPU" in (run / "details.md").read_text()


class _Stepper:
    """A stand-in for timing.Stepper: each step takes 2 ms and burns 0.5 J on the fake GPU."""

    def __init__(self, gpu: _FakeNvml) -> None:
        self.gpu, self.step, self.batches = gpu, 0, [0]

    def count(self) -> int:
        return 0

    def one(self) -> tuple[float, float]:
        self.step += 1
        self.gpu.energy_mj += 500
        return 0.002, 1.0

    def block(self, steps: int, chained: bool) -> tuple[float, float]:
        return 0.001, 1.0


class _FakeNvml:
    """The part of pynvml the sampler calls; ``counter`` False: a GPU without an energy counter."""

    def __init__(self, counter: bool = True) -> None:
        self.counter, self.energy_mj = counter, 1_000_000

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return "gpu0"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "Stand-in GPU"

    def nvmlDeviceGetUtilizationRates(self, handle: str):
        from types import SimpleNamespace

        return SimpleNamespace(gpu=50)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        if not self.counter:
            raise RuntimeError("NVMLError_NotSupported")
        return self.energy_mj


@pytest.mark.parametrize("counter", [True, False])
def test_a_turn_reads_the_gpus_energy_counter_around_its_synced_steps(monkeypatch, counter):
    import sys
    from types import SimpleNamespace

    from harness.measuring.gpu_util import UtilSampler
    from harness.running import resident

    fake = _FakeNvml(counter)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = UtilSampler(interval_s=10)
    taken = resident.take_turn(_Stepper(fake), SimpleNamespace(pass_steps=1, chained=False), 4, sampler, piped=True)
    assert taken["block_s"] == pytest.approx(0.002) and taken["piped_s"] == 0.001
    assert taken["trained_steps"] == 4, "what the turn's loss comes after"
    if counter:
        assert taken["energy_j"] == pytest.approx(0.5), "4 steps, 2 J in all: 0.5 J a step"
    else:
        assert "energy_j" not in taken, "no counter: no figure, never 0"
    assert sampler.energy_mj() is None, "outside its turn the sampler reads nothing"


def test_a_cells_energy_is_the_geometric_mean_of_its_processes_with_their_interval():
    from harness.stats import cells

    found = cells.energy([{"energy_per_step_j": e} for e in (0.4, 0.5, 0.45)])
    assert found["energy_per_step_j"] == pytest.approx((0.4 * 0.5 * 0.45) ** (1 / 3))
    low, high = found["energy_ci_j"]
    assert low < found["energy_per_step_j"] < high
    assert "energy_ci_j" not in cells.energy([{"energy_per_step_j": 0.4}, {"energy_per_step_j": 0.5}])
    assert cells.energy([{"energy_per_step_j": 0.4}, {"energy_per_step_j": None}]) == {"energy_per_step_j": None}
    assert cells.energy([{}, {}]) == {}, "no process tried: a CPU cell, or an older record"


def test_the_memory_table_gives_energy_per_step_on_a_gpu_and_says_where_it_is_not_measured():
    with_counter = record("jax-jit", device="cuda", median_ms=2.0, host_peak_rss_bytes=2**30,
                          energy_per_step_j=0.8, energy_ci_j=[0.7, 0.9])  # fmt: skip
    without = record("torch-eager", device="cuda", median_ms=2.0, host_peak_rss_bytes=2**30, energy_per_step_j=None)
    older = record("torch-eager", device="cuda", median_ms=2.0, host_peak_rss_bytes=2**30)
    cpu = record("torch-eager", median_ms=1.0, host_peak_rss_bytes=2**30)
    assert hardware.energy_text(with_counter) == "0.8 [0.7, 0.9] J (400 W)"
    assert hardware.energy_text(without).startswith("not measured (NVML gave no energy counter")
    assert hardware.energy_text(older) == "not measured (a record from before energy was read)"
    assert hardware.energy_text(cpu) == "—"
    assert "GPU energy per step" in "\n".join(hardware.memory([with_counter, without, cpu]))
    assert "energy" not in "\n".join(hardware.memory([cpu])), "a CPU run has no energy column"


def test_torch_kernels_on_a_gpu_are_timed_on_the_device_clock_and_fall_back_with_a_word(capsys):
    """The CUDA graph timer, on this CPU-only torch, cannot capture: it says so and times the
    kernel back to back as the other libraries are timed (a real number, never a failure)."""
    import numpy as np

    from harness.measuring import floors

    a = np.ones((64, 64), np.float32)
    seconds = floors._device_best(lambda: a @ a, lambda r: r)
    assert 0 < seconds < 1
    assert "CUDA graph capture failed" in capsys.readouterr().err
    chosen = []
    made = (lambda kernel: lambda: chosen.append(kernel), lambda r: r)
    for library, device in (("torch", "cuda"), ("torch", "cpu"), ("jax", "cuda")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(floors, "kernels_of", lambda *_: made)
            mp.setattr(floors, "_device_best", lambda fn, sync: 1.0)
            mp.setattr(floors, "_best", lambda fn, sync: 2.0)
            (value,) = floors.measure(library, device, [("matmul", 2, 2, 2)]).values()
        assert value == (1.0 if (library, device) == ("torch", "cuda") else 2.0), (library, device)

"""The GPU's own figures in a report, from stand-in records and peaks (this machine has no GPU):
the host-to-device peak beside each cell's placement of a batch, and the peaks' start/end merge."""

from __future__ import annotations

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

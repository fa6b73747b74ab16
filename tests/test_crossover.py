"""CPU against GPU along a sweep (``harness crossover``): the plan's axes, the crossover sentences
on stand-in records (the GPU cells are synthetic: this machine has none), the report's first
screen, and the command's refusal on a CPU-only machine."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness import cli, records
from harness.install import variant
from harness.reporting import answer, crossover, report, sweeps, workload_tables
from harness.running.plan import PlanError, parse_sweeps, plan
from tests.fakes import as_rounds, fake_info, report_text
from tests.test_summary_compare_sweep import ENV, timed
from workloads import WORKLOADS


def swept(adapter, device, field, value, median_ms, seed):
    rec = timed(adapter, median_ms, device=device, seed=seed, sweep={"field": field, "value": value})
    rec["overrides"] = [f"{field}={value}"]
    rec["cell_id"] = f"{adapter}|{device}|{field}={value}"
    return rec


def series(adapter, field, cpu_ms, gpu_ms, values=(16, 256, 1024, 4096)):
    out = []
    for i, (v, c, g) in enumerate(zip(values, cpu_ms, gpu_ms, strict=True)):
        out += [swept(adapter, "cpu", field, v, c, 2 * i), swept(adapter, "cuda", field, v, g, 2 * i + 1)]
    return out


def test_the_gpu_wins_from_the_first_value_where_it_stays_separated_faster():
    recs = series("torch-eager", "batch_size", [1, 5, 20, 80], [2, 2.5, 3, 4])
    (found,) = crossover.device_crossovers(recs)
    assert found.gpu_from == 256
    assert [round(v.point, 2) for _, v in found.points] == [0.5, 2.0, 6.67, 20.0], "time(cpu) / time(gpu)"
    line = found.sentence()
    assert line.startswith("torch-eager on mlp: the GPU is faster from batch_size=256 on (GPU speed-up 2.00 [")
    assert "at batch_size=16 the CPU is faster (GPU speed-up 0.50 [" in line


def test_no_crossover_is_said_plainly_at_either_end_and_where_the_top_is_not_settled():
    gpu_always = crossover.device_crossovers(series("jax-jit", "hidden", [4, 8, 16, 32], [1, 1, 1, 1]))[0]
    assert gpu_always.gpu_from == 16
    assert "the GPU is faster at every hidden swept, from hidden=16" in gpu_always.sentence()
    assert "below the range" in gpu_always.sentence()
    cpu_always = crossover.device_crossovers(series("jax-jit", "hidden", [1, 1, 1, 1], [4, 4, 3, 2]))[0]
    assert cpu_always.gpu_from is None
    assert "the CPU is faster at every hidden swept (16 to 4096;" in cpu_always.sentence()
    assert "no crossover in the range" in cpu_always.sentence()
    # faster in the middle, the same speed at the top: no value from which the GPU stays ahead
    middle = crossover.device_crossovers(series("jax-jit", "hidden", [1, 4, 4, 1], [2, 1, 1, 1]))[0]
    assert middle.gpu_from is None
    assert middle.sentence().startswith("jax-jit on mlp: no crossover settled, at hidden=4096 they run at the same")


def test_with_one_process_per_cell_the_crossover_is_read_from_the_ratios_and_says_so():
    recs = series("torch-eager", "batch_size", [1, 5, 20, 80], [2, 2.5, 3, 4])
    for r in recs:  # one process each: no pair can be judged
        r["process_levels"] = {1: r["process_levels"][1]}
    (found,) = crossover.device_crossovers(recs)
    assert not found.judged and found.gpu_from == 256
    assert found.sentence() == (
        "torch-eager on mlp, by the ratios alone (one process per cell: no pair judged): the GPU is faster from "
        "batch_size=256 on (GPU speed-up 2.00); at batch_size=16 the CPU is faster (GPU speed-up 0.50)"
    )


def test_where_a_loop_that_never_syncs_crosses_over_elsewhere_the_sentence_adds_it():
    recs = series("jax-jit", "hidden", [1, 4, 8, 16], [2, 2, 2, 2])  # synced: launch and sync latency
    for r in recs:  # pipelined: the GPU's kernels alone, a quarter of its synced step; the CPU's unchanged
        r["pipelined_s"] = r["median_s"] / (4 if r["device"] == "cuda" else 1)
    (found,) = crossover.device_crossovers(recs)
    assert found.gpu_from == 256 and found.pipelined_from == 16
    assert found.sentence().endswith(
        "; pipelined, as a loop that never syncs runs (ratios alone): the GPU is faster at every value, 2.00x at "
        "hidden=16"
    )
    for r in recs:  # the same crossover either way: no second clause
        r["pipelined_s"] = r["median_s"]
    assert "pipelined" not in crossover.device_crossovers(recs)[0].sentence()


def test_a_single_device_or_a_single_value_gives_no_crossover():
    cpu_only = [r for r in series("torch-eager", "batch_size", [1, 2, 3, 4], [1, 2, 3, 4]) if r["device"] == "cpu"]
    assert crossover.device_crossovers(cpu_only) == []
    one_value = series("torch-eager", "batch_size", [1], [2], values=(16,))
    assert crossover.device_crossovers(one_value) == []


@pytest.mark.slow
def test_a_two_axis_crossover_run_reports_each_axis_and_states_the_crossover_first(tmp_path):
    recs = series("torch-eager", "batch_size", [1, 5, 20, 80], [2, 2.5, 3, 4])
    recs += series("torch-eager", "hidden", [1, 1.2, 9, 60], [2, 2, 2.5, 3], values=(64, 256, 1024, 4096))
    run = _written(tmp_path, recs)
    first = (run / "report.md").read_text()
    assert "- CPU against GPU along the sweep, where the GPU starts to win:\n" in first
    assert "\n  - torch-eager on mlp: the GPU is faster from batch_size=256 on" in first
    assert "\n  - torch-eager on mlp: the GPU is faster from hidden=1024 on" in first
    assert "not measured, this run has no GPU cells" not in first
    text = report_text(run)
    assert "## Sweep: mlp over batch_size" in text and "## Sweep: mlp over hidden" in text
    assert {p.name for p in run.glob("mlp-sweep-*.png")} == {"mlp-sweep-batch_size.png", "mlp-sweep-hidden.png"}


def test_sweep_section_splits_axes():
    recs = series("torch-eager", "batch_size", [1, 5, 20, 80], [2, 2.5, 3, 4])
    recs += series("torch-eager", "hidden", [1, 1.2, 9, 60], [2, 2, 2.5, 3], values=(64, 256, 1024, 4096))
    text = "\n".join(sweeps.sweep_section(recs, None))
    assert text.count("## Sweep: mlp over") == 2
    assert "- torch-eager on mlp: the GPU is faster from hidden=1024 on" in text


ADAPTERS = {"torch-eager": fake_info("torch-eager", "torch"), "jax-jit": fake_info("jax-jit", "jax")}


def test_axes_vary_one_field_each_and_a_list_field_takes_one_width_for_every_layer():
    cells = plan(
        ADAPTERS, "all", "mlp", "cpu,cuda", [], "quick", 1, "r", strategy="exact",
        sweep="hidden=64,4096;batch_size=16,8192", gpu_present=True,
    )  # fmt: skip
    assert len(cells) == 2 * 2 * 4, "adapters x devices x (two values on each of two axes)"
    torch_cpu = [c for c in cells if c["adapter"] == "torch-eager" and c["device_requested"] == "cpu"]
    assert [(c["sweep"]["field"], c["sweep"]["value"]) for c in torch_cpu] == [
        ("hidden", 64.0), ("hidden", 4096.0), ("batch_size", 16.0), ("batch_size", 8192.0)
    ]  # fmt: skip
    assert tuple(torch_cpu[1]["spec"]["hidden"]) == (4096, 4096)
    assert torch_cpu[1]["spec"]["batch_size"] == WORKLOADS["mlp"].batch_size
    assert tuple(torch_cpu[3]["spec"]["hidden"]) == (300, 100) and torch_cpu[3]["spec"]["batch_size"] == 8192
    assert len({c["cell_id"] for c in cells}) == len(cells)


@pytest.mark.parametrize(
    ("expr", "named"),
    [("hidden=64,128;hidden=256,512", "hidden given twice"), ("hidden=1.5,64", "1.5"), ("hidden=64", "at least two")],
)
def test_bad_axes_are_refused_naming_the_value(expr, named):
    with pytest.raises(PlanError, match="--sweep|hidden") as caught:
        plan(ADAPTERS, "all", "mlp", "cpu", [], "quick", 1, "r", strategy="exact", sweep=expr)
    assert named in str(caught.value)


def test_parse_sweeps_keeps_the_axes_in_order():
    assert parse_sweeps("hidden=64,256; batch_size=16,32") == [("hidden", ["64", "256"]), ("batch_size", ["16", "32"])]


def _no_gpu(monkeypatch, driver):
    monkeypatch.setattr(variant, "detect", lambda: SimpleNamespace(driver=driver))


def test_crossover_on_a_cpu_only_machine_says_so_and_runs_nothing(monkeypatch, tmp_path, capsys):
    _no_gpu(monkeypatch, None)
    assert cli.main(["crossover", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "this machine has no NVIDIA GPU" in err and "`make sweep`" in err
    assert list(tmp_path.iterdir()) == []


def test_crossover_defaults_plan_cpu_and_gpu_cells_of_both_axes(monkeypatch, tmp_path, capsys):
    _no_gpu(monkeypatch, "580.00")  # a stand-in driver: the plan, not a run
    assert cli.main(["crossover", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "16 cells planned" in out, "1 adapter x 2 devices x (4 widths + 4 batch sizes)"
    assert "hidden=4096,4096" in out and "batch_size=8192" in out
    args = cli.parser().parse_args(["crossover"])
    assert (args.framework, args.device, args.workload, args.budget) == ("torch-eager", "cpu,cuda", "mlp", 720)


def test_a_gpu_run_says_which_step_its_verdicts_rank_and_prints_the_pipelined_one_first(tmp_path):
    recs = series("jax-jit", "batch_size", [1, 5, 20, 80], [2, 2.5, 3, 4])
    for r in recs:
        r["pipelined_s"] = r["median_s"] * (0.25 if r["device"] == "cuda" else 1.0)
    (line,) = answer.pipelined_lines(recs)
    assert line.startswith("On the GPU the verdicts rank the synced step")
    assert "over the run's 4 GPU cells" in line
    cpu_only = [r for r in recs if r["device"] == "cpu"]
    assert answer.pipelined_lines(cpu_only) == []
    first = workload_tables.workload_table(recs[:2], compact=True)  # one value: a CPU cell and a GPU cell
    assert "pipelined (ms/step)" in first.splitlines()[0]
    assert "pipelined" not in workload_tables.workload_table(cpu_only[:1], compact=True)


def test_memory_sets_adapters_against_each_other_never_one_against_itself():
    small = series("jax-jit", "hidden", [1, 2], [1, 2], values=(64, 4096))
    for r, mib in zip(small, (600, 700, 1700, 1800), strict=True):  # cpu 64, cuda 64, cpu 4096, cuda 4096
        r["host_peak_rss_bytes"] = mib * 2**20
    assert answer.memory_lines(small) == [], "jax-jit at 700 MiB against itself at 1,800 is no finding"
    other = series("torch-eager", "hidden", [1, 2], [1, 2], values=(64, 4096))
    for r in other:
        r["host_peak_rss_bytes"] = 500 * 2**20
    assert answer.memory_lines(small + other) == [
        "mlp on cpu: jax-jit 1,700 MiB against torch-eager 500 MiB",
        "mlp on cuda: jax-jit 1,800 MiB against torch-eager 500 MiB",
    ]


def test_a_sweep_of_many_settings_lists_only_those_with_a_fastest_and_counts_the_rest(tmp_path):
    recs = series("torch-eager", "batch_size", [1, 2, 4, 8], [2, 2, 2, 2])
    recs += series("jax-jit", "batch_size", [1, 2, 4, 8], [2, 2, 2, 1], values=(16, 256, 1024, 4096))
    first = report_text(_written(tmp_path, recs)).split("## The answer", 1)[1].split("\n## ", 1)[0]
    bullets = [line for line in first.splitlines() if line.startswith("- **mlp")]
    assert len(bullets) == 1 and "on cuda**: jax-jit is the fastest" in bullets[0], bullets
    assert "- 7 more of the run's 8 workloads and settings have no fastest named" in first


def _written(tmp_path, recs):
    run = tmp_path / "run"
    run.mkdir()
    for r in recs:
        for p in as_rounds(r):
            records.append(run / records.RESULTS, p)
    (run / records.ENV).write_text(json.dumps(ENV))
    report.write(run)
    return run

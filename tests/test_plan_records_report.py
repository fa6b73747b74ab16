"""Planning, records and reports: harness logic on synthetic data."""

from __future__ import annotations

import json
import math

import pytest

from harness import records
from harness.reporting import breakeven, formatting, hardware, report, sections, tables
from harness.running.plan import PlanError, plan, select_adapters, select_devices, select_workloads
from harness.stats.cells import combine_all
from tests.fakes import as_rounds, fake_info, record
from tests.test_workload_tables import STEADY, workload_section

ADAPTERS = {
    "jax-jit": fake_info("jax-jit", "jax"),
    "torch-compile": fake_info("torch-compile", "torch"),
    "torch-eager": fake_info("torch-eager", "torch"),
}


def test_select_adapters_by_name_family_all_and_list():
    assert select_adapters("all", ADAPTERS) == list(ADAPTERS)
    assert select_adapters("torch", ADAPTERS) == ["torch-compile", "torch-eager"]
    assert select_adapters("jax-jit,torch-eager,jax", ADAPTERS) == ["jax-jit", "torch-eager"]


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: select_adapters("troch-eager", ADAPTERS),
            "unknown framework or adapter 'troch-eager' (did you mean 'torch-eager'?); valid: all, jax, torch, jax-jit",
        ),
        (lambda: select_workloads("mlp,cnnn"), "unknown workload 'cnnn'"),
        (lambda: select_devices("gpu"), "unknown device 'gpu' (did you mean 'cuda'?); valid: auto, cpu, cuda, all"),
        (lambda: select_devices(","), "empty selection"),
    ],
)
def test_bad_selections_name_the_value_and_the_valid_ones(call, message):
    with pytest.raises(PlanError) as info:
        call()
    assert message in str(info.value)


def test_plan_builds_cells_in_order_with_spec():
    cells = plan(ADAPTERS, "torch", "mlp,mlp-wide", "all", ["batch_size=64"], "quick", 2, "r")
    keys = [(c["workload"], c["device_requested"], c["adapter"]) for c in cells]
    assert keys[:3] == [
        ("mlp", "cpu", "torch-compile"),
        ("mlp", "cpu", "torch-eager"),
        ("mlp", "cuda", "torch-compile"),
    ]
    assert len(cells) == 8
    assert all(c["spec"]["batch_size"] == 64 for c in cells)
    assert cells[0]["param_count"] == 266_610
    assert len({c["cell_id"] for c in cells}) == 8


def test_plan_rejects_bad_override_for_any_workload():
    with pytest.raises(PlanError, match="unknown field 'widht'"):
        plan(ADAPTERS, "all", "all", "cpu", ["widht=3"], "quick", 2, "r")


def test_records_round_trip_and_reject_damage(tmp_path):
    path = tmp_path / records.RESULTS
    records.append(path, record("torch-eager"))
    records.append(path, record("jax-jit", status="skipped", reason="no CUDA device visible to jax"))
    loaded = records.load(path)
    assert [r["adapter"] for r in loaded] == ["torch-eager", "jax-jit"]

    with path.open("a") as f:
        f.write('{"adapter": "x"\n')
    with pytest.raises(records.RecordError, match=r"results.jsonl:3: not a JSON record"):
        records.load(path)

    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(records.RecordError, match="foreign.jsonl:1: not a dlcompare record"):
        records.load(foreign)


def test_append_writes_a_nan_result_as_a_failed_record(tmp_path):
    records.append(tmp_path / "r.jsonl", record("torch-eager", loss_last=float("nan")))
    (rec,) = records.load(tmp_path / "r.jsonl")
    assert rec["status"] == "failed" and rec["reason"] == "result not recordable as JSON: loss_last=nan"


def _run_dir(tmp_path, recs):
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    (tmp_path / records.ENV).write_text(json.dumps({"cpu": "Test CPU", "threads": 2, "packages": {"torch": "2"}}))
    return tmp_path


def _row(md: str, adapter: str, heading: str = "## mlp (") -> dict[str, str]:
    """The adapter's row of a workload section, main and details table together."""
    main, details = workload_section(md, heading)
    index = next(i for i, row in enumerate(main) if row["adapter"] == adapter)
    return main[index] | details[index]


def test_report_tables_ok_skipped_and_failed_cells(tmp_path):
    run = _run_dir(
        tmp_path,
        [
            record("torch-eager", median_ms=2.0),
            record("jax-jit", median_ms=1.0, traces=1, compiles=1, compile_s=0.25),
            record("tf-function", status="skipped", reason="no CUDA device visible to tensorflow"),
            record(
                "keras-torch", status="failed", reason="RuntimeError: boom", stderr_tail="Traceback\nRuntimeError: boom"
            ),
            record("torch-eager", workload="mlp-wide", median_ms=10.0),
        ],
    )
    md = report.build(run)
    assert "5 cells: 3 ok, 1 skipped, 1 failed." in md
    assert "## mlp (266,610 parameters, batch 32, sgd lr 0.01)" in md
    assert "## mlp-wide" in md
    torch_row, jax_row = _row(md, "torch-eager"), _row(md, "jax-jit")
    assert jax_row[STEADY] == "1" and jax_row["time vs fastest"] == "1.00", "fastest is 1.00"
    assert torch_row[STEADY] == "2" and torch_row["time vs fastest"] == "2.00"
    assert jax_row["traces / compiles"] == "1 traces, 1 compiles, 0.25 s"
    assert _row(md, "tf-function")["status"] == "skipped: no CUDA device visible to tensorflow"
    assert _row(md, "keras-torch")["status"] == "failed: RuntimeError: boom"
    assert _row(md, "keras-torch")[STEADY] == "—" and _row(md, "keras-torch")["graph"] == "dynamic"
    main, details = workload_section(md, "## mlp (")
    order = ["jax-jit", "torch-eager", "keras-torch", "tf-function"]
    assert [r["adapter"] for r in main] == [r["adapter"] for r in details] == order, "fastest first, not-run last"
    assert "Test CPU" in md and "## Method" in md
    assert "## Failed cells\n\n- **keras-torch / mlp / cpu**: RuntimeError: boom" in md
    assert "  RuntimeError: boom\n  ```" in md


def test_report_of_corrupt_results_is_a_clear_error(tmp_path):
    (tmp_path / records.RESULTS).write_text("garbage\n")
    with pytest.raises(records.RecordError, match="results.jsonl:1"):
        report.build(tmp_path)


@pytest.mark.parametrize("value, text", [(0.000123456, "0.000123"), (1.23456, "1.23"), (1234.5, "1,234"), (None, "—")])
def test_significant_digits(value, text):
    assert formatting.sig(value) == text


def test_plan_expands_loop_strategies_only_for_training_with_a_loop():
    cells = plan(ADAPTERS, "jax-jit", "mlp,rnn-caption,rnn-decode", "cpu", [], "quick", 2, "r", "exact,padded")
    assert [(c["workload"], c["overrides"]) for c in cells] == [
        ("mlp", []),
        ("rnn-caption", ["strategy=exact"]),
        ("rnn-caption", ["strategy=padded"]),
        ("rnn-decode", []),
    ]
    fixed = plan(ADAPTERS, "jax-jit", "rnn-caption", "cpu", ["strategy=bucketed"], "quick", 2, "r")
    assert [c["overrides"] for c in fixed] == [["strategy=bucketed"]]
    with pytest.raises(PlanError, match="unknown strategy 'paded' \\(did you mean 'padded'\\?\\)"):
        plan(ADAPTERS, "all", "rnn-caption", "cpu", [], "quick", 2, "r", "paded")


def test_plan_runs_the_transformer_attention_kernels_side_by_side_and_only_its_own_strategies():
    cells = plan(ADAPTERS, "jax-jit", "transformer", "cpu", [], "quick", 2, "r", "exact,graph-loop")
    assert [c["overrides"] for c in cells] == [
        ["strategy=exact", "attention=naive"],
        ["strategy=exact", "attention=fused"],
    ]
    fixed = plan(ADAPTERS, "jax-jit", "transformer", "cpu", ["attention=fused"], "quick", 2, "r", "padded")
    assert [c["overrides"] for c in fixed] == [["attention=fused", "strategy=padded"]]
    with pytest.raises(PlanError, match="no workload of 'transformer' has any of the strategies graph-loop"):
        plan(ADAPTERS, "jax-jit", "transformer", "cpu", [], "quick", 2, "r", "graph-loop")


def _timed(adapter, graph, strat, cold, median_ms, **extra):
    return record(
        adapter,
        workload="rnn-caption",
        median_ms=median_ms,
        graph=graph,
        overrides=[f"strategy={strat}"],
        spec={"batch_size": 32, "optimizer": "adam", "learning_rate": 0.003, "strategy": strat, "task": "train"},
        cold_times_s=cold,
        **extra,
    )


def test_break_even_from_cold_window_and_steady_medians():
    eager = _timed("torch-eager", "dynamic", "exact", [0.01] * 4, 10.0)  # 10 ms/step throughout
    static = _timed("jax-jit", "static", "padded", [1.0, 0.005, 0.005, 0.005], 5.0)
    # static: 1.015 s after 4 steps, then 5 ms/step; eager 0.04 s, then 10 ms/step
    assert breakeven.cumulative_s(static, 4) == pytest.approx(1.015)
    assert breakeven.cumulative_s(eager, 10) == pytest.approx(0.1)
    assert breakeven.break_even(static, eager) == 4 + math.ceil((1.015 - 0.04) / 0.005)
    slow = _timed("tf-function", "static", "exact", [2.0] * 4, 20.0)
    assert breakeven.break_even(slow, eager) is None
    ahead = _timed("jax-jit", "static", "graph-loop", [0.001] * 4, 1.0)
    assert breakeven.break_even(ahead, eager) == 1


def test_static_vs_dynamic_section(tmp_path):
    cells = [
        _timed("torch-eager", "dynamic", "exact", [0.01] * 4, 10.0),
        _timed("jax-jit", "static", "exact", [1.0] * 4, 5.0, traces=4, compiles=4, compile_s=3.9),
        _timed("jax-jit", "static", "padded", [1.0, 0.005, 0.005, 0.005], 5.0, traces=1, compiles=1),
        _timed("tf-function", "static", "exact", [2.0] * 4, 20.0, traces=4),
    ]
    run = _run_dir(tmp_path, [r for cell in cells for r in as_rounds(cell)])
    md = report.build(run)
    assert "### Loop strategies: rnn-caption on cpu" in md
    section = md.split("### Loop strategies")[1].split("\n## ")[0]
    rows = {(r[0], r[2]): r for r in (_cells(line) for line in section.splitlines() if line.startswith("| "))}
    assert rows[("torch-eager", "exact")][-1] == "baseline"
    combined = {(r["adapter"], r["spec"]["strategy"]): r for r in combine_all([r for c in cells for r in as_rounds(c)])}
    # 4 cold steps, then the steady steps (the cells' printed ones) close the gap
    padded, eager = combined[("jax-jit", "padded")], combined[("torch-eager", "exact")]
    gap = sum(padded["cold_times_s"]) - sum(eager["cold_times_s"])
    assert rows[("jax-jit", "padded")][-1] == f"{4 + math.ceil(gap / (eager['median_s'] - padded['median_s'])):,}"
    assert rows[("jax-jit", "exact")][3] == "4 traces, 4 compiles, 3.9 s"
    assert rows[("jax-jit", "exact")][7] == "4"  # cold time of 4 batches, seconds
    assert rows[("jax-jit", "exact")][6] == "baseline" and rows[("jax-jit", "padded")][6].startswith("1.00 [")
    assert rows[("tf-function", "exact")][6] == "baseline"  # its own exact cell: nothing else to set it against
    assert rows[("tf-function", "exact")][-1] == "never"
    # the per-workload tables show the strategy column beside the adapter
    main, details = workload_section(md, "## rnn-caption")
    assert list(main[0])[:2] == list(details[0])[:2] == ["adapter", "strategy"]


def test_loop_strategy_rows_go_by_adapter_and_its_fastest_strategy_first(tmp_path):
    cells = [
        _timed("jax-jit", "static", "padded", [1.0] * 4, 9.0),
        _timed("torch-eager", "dynamic", "padded", [0.01] * 4, 12.0),
        _timed("jax-jit", "static", "exact", [1.0] * 4, 5.0),
        _timed("torch-eager", "dynamic", "exact", [0.01] * 4, 10.0),
        _timed("jax-jit", "static", "bucketed", [1.0] * 4, 6.0),
    ]
    section = report.build(_run_dir(tmp_path, [r for cell in cells for r in as_rounds(cell)]))
    section = section.split("### Loop strategies")[1].split("\n## ")[0]
    rows = [(c[0], c[2]) for c in (_cells(line) for line in section.splitlines() if line.startswith("| "))][1:]
    assert rows == [
        ("jax-jit", "exact"),
        ("jax-jit", "bucketed"),
        ("jax-jit", "padded"),
        ("torch-eager", "exact"),
        ("torch-eager", "padded"),
    ]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_ties_are_not_ranked_and_sections_read_records(tmp_path):
    run = _run_dir(
        tmp_path,
        [
            record("torch-eager", median_ms=1.0, ci_low_s=0.9e-3, ci_high_s=1.1e-3),
            record("jax-jit", median_ms=1.05, ci_low_s=1.0e-3, ci_high_s=1.2e-3),
            record("tf-function", median_ms=2.0, ci_low_s=1.9e-3, ci_high_s=2.1e-3),
            record("torch-eager", median_ms=1.5, data="host", to_device_s=0.2e-3, ci_low_s=1.4e-3, ci_high_s=1.6e-3),
            record("torch-eager", status="skipped", data="loader", reason="no loader"),
        ],
    )
    md = report.build(run)
    assert _row(md, "jax-jit")["time vs fastest"] == "1.05 unresolved (one process per cell)"
    assert _row(md, "tf-function")["time vs fastest"] == "2.00"
    assert _row(md, "torch-eager")[STEADY] == "1 [0.9, 1.1]"
    pipeline = md.split("## Input pipeline")[1].split("\n## ")[0]
    row = _cells(next(line for line in pipeline.splitlines() if line.startswith("| torch-eager")))
    assert row[4:] == ["1", "1.5 (1.50x)", "skipped: no loader", "0.2", "33%"]


def test_hardware_section_and_physics_flags(tmp_path):
    recs = [
        record("torch-eager", flops_per_step=3.6e7, gflops=36.0, gflops_max_step=50.0),
        record("jax-jit", flops_per_step=3.6e7, gflops=300.0, gflops_max_step=400.0),
    ]
    peak = {"matmul_gflops": 200.0, "matmul_gflops_by": {"numpy": 200.0}, "copy_gbs": 15.0}
    env = {"peaks": {"cpu": {**peak, "matmul_gflops_start": 200.0}}}  # measured at the start alone
    problems = hardware.physics_violations(recs, env)
    assert len(problems) == 1 and problems[0].startswith("jax-jit / mlp / cpu: a step ran at 400 GFLOP/s")
    md = "\n".join(hardware.hardware(recs, env))
    assert (
        "| cpu      | 200              | float32     | numpy 200    | 200                  | —            | 15  " in md
    )
    assert "| torch-eager | mlp        | —          | cpu      | 0.036            | 36        | 18.0%" in md
    assert "**Physics check failed**" in md


def test_memory_section_says_unavailable_never_zero(tmp_path):
    recs = [record("torch-eager", host_peak_rss_bytes=300 * 2**20, device_peak_bytes=None, gpu_util_mean=None)]
    md = "\n".join(hardware.memory(recs))
    assert "| 300 " in md and "unavailable" in md and "| 0 " not in md


def test_sweep_plans_one_cell_per_value_and_validates():
    cells = plan(ADAPTERS, "torch-eager", "mlp", "cpu", [], "quick", 2, "r", sweep="batch_size=16,64")
    assert [(c["overrides"], c["sweep"]) for c in cells] == [
        (["batch_size=16"], {"field": "batch_size", "value": 16.0}),
        (["batch_size=64"], {"field": "batch_size", "value": 64.0}),
    ]
    assert cells[0]["cell_id"] != cells[1]["cell_id"]
    for bad, message in [("batch_size=16", "at least two values"), ("batch_size=a,b", "is not a number")]:
        with pytest.raises(PlanError, match=message):
            plan(ADAPTERS, "torch-eager", "mlp", "cpu", [], "quick", 2, "r", sweep=bad)
    with pytest.raises(PlanError, match="batch_size must be > 0"):
        plan(ADAPTERS, "torch-eager", "mlp", "cpu", [], "quick", 2, "r", sweep="batch_size=0,16")


def test_within_framework_section_pairs_dynamic_and_static_modes(tmp_path):
    eager = dict(record("torch-eager", median_ms=2.0), framework="torch", graph="dynamic", cold_times_s=[0.002] * 4)
    compiled = dict(
        record("torch-compile", median_ms=1.0, traces=1, compiles=1, compile_s=5.0),
        framework="torch",
        graph="static",
        cold_times_s=[5.0, 0.001, 0.001, 0.001],
    )
    lonely = dict(record("jax-jit", median_ms=1.0), framework="jax", graph="static")
    raw = [*as_rounds(eager), *as_rounds(compiled), lonely]
    md = report.build(_run_dir(tmp_path, raw))
    eager, compiled, _ = combine_all(raw)  # five processes each: the cold window their mean
    section = md.split("### Within each framework")[1].split("\n### ")[0]
    rows = [_cells(line) for line in section.splitlines() if line.startswith("| torch")]
    assert rows == [
        ["torch", "mlp", "cpu", "torch-eager", formatting.sig(eager["median_s"] * 1e3), "torch-compile",
         formatting.sig(compiled["median_s"] * 1e3), "2.00x", "1 traces, 1 compiles, 5 s",
         f"{breakeven.break_even(compiled, eager):,}"]
    ]  # fmt: skip
    assert "| jax " not in section, "a framework with only one mode has no row"


def test_input_pipeline_section_explains_how_to_get_it_when_one_mode_ran():
    section = "\n".join(sections.input_pipeline([record("torch-eager")]))
    assert section.startswith("## Input pipeline") and "Run with `DATA=all`" in section


def test_method_describes_the_protocol_each_record_was_timed_with():
    from harness.measuring.timing import PROFILES, protocol

    old = dict(protocol(PROFILES["quick"]), budget_s=2.0)
    recs = [
        record("torch-eager", protocol=protocol(PROFILES["quick"]), rounds_done=2),
        record("jax-jit", protocol=old, rounds_done=2),
        record("tf-eager"),  # recorded before records carried their protocol
    ]
    text = sections.method(recs)
    assert f"either {PROFILES['quick'].budget_s:g} s spent" in text and "either 2 s spent" in text
    assert "Cells without a protocol in their record were measured by an earlier version" in text
    assert "each cell ran in 1 or 2 fresh processes (rounds)" in text
    assert "pipelined" not in text.split("Rounds:")[1], "no pipelined cell, no pipelined paragraph"


def test_settings_table_has_a_row_per_adapter_and_distinct_settings():
    sgd = {"optimizer_kernel": "torch.optim.SGD (foreach)"}
    adam = {"optimizer_kernel": "torch.optim.Adam (foreach)"}
    recs = [
        record("torch-eager", "mlp", settings=sgd),
        record("torch-eager", "cnn", settings=sgd),
        record("torch-eager", "mlp-wide", settings=adam),
        record("jax-jit", "mlp", settings={"optimizer_kernel": "optax.sgd"}),
        record("jax-jit", "mlp", status="failed"),
    ]
    rows = [line for line in tables.settings_table(recs).splitlines() if line.startswith("| ")][1:]
    assert [_cells(row)[:2] for row in rows] == [
        ["torch-eager", "mlp, cnn"],
        ["torch-eager", "mlp-wide"],
        ["jax-jit", "mlp"],
    ]
    assert "optimizer_kernel=torch.optim.Adam (foreach)" in rows[1]

"""Planning, records and reports: harness logic on synthetic data."""

from __future__ import annotations

import json

import pytest

from harness import records, report
from harness.plan import PlanError, plan, select_adapters, select_devices, select_workloads
from tests.fakes import fake_info, record

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


def test_append_refuses_nan(tmp_path):
    with pytest.raises(ValueError):
        records.append(tmp_path / "r.jsonl", record("torch-eager", loss_last=float("nan")))
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_text() == ""


def _run_dir(tmp_path, recs):
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    (tmp_path / records.ENV).write_text(json.dumps({"cpu": "Test CPU", "threads": 2, "packages": {"torch": "2"}}))
    return tmp_path


def _row(md: str, adapter: str) -> list[str]:
    line = next(line for line in md.splitlines() if line.startswith(f"| {adapter} "))
    return [c.strip() for c in line.strip("|").split("|")]


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
    assert jax_row[4] == "1" and jax_row[7] == "1.00", "fastest is 1.00"
    assert torch_row[4] == "2" and torch_row[7] == "2.00"
    assert jax_row[8] == "1 traces, 1 compiles, 0.25 s"
    assert _row(md, "tf-function")[-1] == "skipped: no CUDA device visible to tensorflow"
    assert _row(md, "keras-torch")[-1] == "failed: RuntimeError: boom"
    assert "Test CPU" in md and "## Method" in md
    assert "## Failed cells\n\n- **keras-torch / mlp / cpu**: RuntimeError: boom" in md
    assert "  RuntimeError: boom\n  ```" in md


def test_report_of_corrupt_results_is_a_clear_error(tmp_path):
    (tmp_path / records.RESULTS).write_text("garbage\n")
    with pytest.raises(records.RecordError, match="results.jsonl:1"):
        report.build(tmp_path)


@pytest.mark.parametrize("value, text", [(0.000123456, "0.000123"), (1.23456, "1.23"), (1234.5, "1,234"), (None, "—")])
def test_significant_digits(value, text):
    assert report.sig(value) == text

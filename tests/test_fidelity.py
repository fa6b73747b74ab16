"""The fidelity check (harness.checks.fidelity): every in-tree adapter has an idiomatic script, each
script trains the workload's own model (its step-0 loss is the float64 reference's), and the page
gives adapter / script ratios paired by round."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from adapters import discover
from harness import records
from harness.checks import fidelity
from harness.reporting import fidelity as page
from harness.running import runner
from tests.conftest import REPO
from tests.fakes import record, report_text
from workloads import get_workload, override

ADAPTERS = discover()
IN_TREE = [name for name, info in ADAPTERS.items() if info.source == "built-in"]
QUICK = {"DLCOMPARE_FIDELITY_QUICK": "1"}


def test_every_in_tree_adapter_has_an_idiomatic_script():
    known = fidelity.scripts(plugins=False)  # an installed plugin's script lives outside the tree
    assert sorted(n for n in IN_TREE if n in known) == sorted(IN_TREE), set(IN_TREE) - set(known)
    assert all((REPO / (module.replace(".", "/") + ".py")).is_file() for module in known.values())


def test_each_adapter_cell_is_followed_by_its_script_twin():
    cells = [{"adapter": "torch-eager", "cell_id": "a"}, {"adapter": "no-script", "cell_id": "b"}]
    twins = fidelity.with_scripts(cells, {"torch-eager": "fidelity.torch_loop"})
    assert [c["cell_id"] for c in twins] == ["a", "a|idiomatic"]
    assert twins[1]["script"] == "fidelity.torch_loop" and records.is_idiomatic(twins[1])
    assert not records.is_idiomatic(twins[0]) and "script" not in twins[0]


@pytest.mark.frameworks
@pytest.mark.parametrize("adapter", sorted(fidelity.scripts()))
def test_script_trains_the_specs_model_from_its_weights(adapter, tmp_path):
    """A script run as the harness runs it: its first loss is the reference's step-0 loss."""
    info = ADAPTERS.get(adapter)
    if info is None or not info.available:
        pytest.skip(f"{adapter} is not available here")
    spec = override(get_workload("mlp"), ["batch_size=8", "num_batches=2"])
    cell = {
        "adapter": adapter,
        "workload": "mlp",
        "overrides": ["batch_size=8", "num_batches=2"],
        "spec": spec.as_dict(),
        "device_requested": "cpu",
        "threads": 1,
        "kind": records.IDIOMATIC,
        "script": fidelity.scripts()[adapter],
    }
    os.environ.update(QUICK)
    try:
        proc = runner.run_worker(info, cell, "bench", tmp_path / "r.json", timeout_s=300)
    finally:
        os.environ.pop("DLCOMPARE_FIDELITY_QUICK")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((tmp_path / "r.json").read_text())
    params = {k: v.astype(np.float64) for k, v in spec.init_params().items()}
    expected, _ = spec.reference_loss_and_grads(params, spec.batches()[0])
    assert rec["status"] == "ok" and rec["kind"] == records.IDIOMATIC
    assert rec["loss_first"] == pytest.approx(expected, rel=page.LOSS_RTOL)
    assert rec["median_s"] > 0 and rec["pipelined_s"] > 0 and len(rec["step_times_s"]) >= 5


def _rounds(adapter_ms: list[float], script_ms: list[float], **extra) -> list[dict]:
    """Round records of one adapter cell and its script twin, with the given per-round medians."""
    out = []
    for k, (a, s) in enumerate(zip(adapter_ms, script_ms, strict=True), start=1):
        common = {"cell_id": "c", "round": k, "pipelined_s": a * 1e-3}
        out.append(record("jax-jit", step_times_s=list(np.full(20, a * 1e-3)), **common, **extra))
        twin = {**common, "cell_id": "c|idiomatic", "pipelined_s": s * 1e-3, "kind": "idiomatic", "script": "s"}
        out.append(record("jax-jit", step_times_s=list(np.full(20, s * 1e-3)), **twin))
    return out


def test_ratios_are_paired_by_round_and_judged_against_the_target():
    (row,) = page.rows(_rounds([1.2, 2.4, 1.8], [1.0, 2.0, 1.5]))
    assert row["latency"][0] == pytest.approx(1.2) and row["throughput"][0] == pytest.approx(1.2)
    assert row["same_start"] is True and row["rounds"] == 3
    assert page._verdict(row) == "slower beyond 1.10x: latency, throughput"
    (close,) = page.rows(_rounds([1.05, 2.1], [1.0, 2.0]))
    assert page._verdict(close) == "unresolved: latency; within 1.10x: throughput", "two rounds: no latency interval"
    text = page.table([row, close])
    assert "1.20 [1.20, 1.20]" in text and "1.05" in text
    (two,) = page.rows(_rounds([1.2, 2.4], [1.0, 2.0]))
    assert "1.20 (unresolved)" in page.table([two]), "two rounds cannot give an interval"


def test_a_different_model_or_a_busy_machine_is_not_judged_a_pass():
    (other,) = page.rows(_rounds([1.0], [1.0], loss_first=2.5))
    assert other["same_start"] is False and page._verdict(other).startswith("different model")
    (busy,) = page.rows(_rounds([1.0], [1.0], contended=True))
    assert page._verdict(busy).startswith("unresolved")
    assert page.summary([busy])[0].startswith("0 of 0")


def test_a_failed_script_is_a_row_with_its_reason():
    recs = _rounds([1.0], [1.0])
    recs[1] = {**recs[1], "status": "failed", "reason": "ImportError: no keras"}
    (row,) = page.rows(recs)
    assert row["problem"] == "failed: ImportError: no keras"
    assert "failed: ImportError: no keras" in page.table([row])


@pytest.mark.frameworks
@pytest.mark.skipif(not ADAPTERS["torch-eager"].available, reason="torch not installed")
def test_fidelity_command_writes_the_page_beside_the_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "fidelity", "--framework", "torch-eager", "--device", "cpu",
         "--sweep", "batch_size=8,16", "--set", "num_batches=2", "--rounds", "1",
         "--out", str(tmp_path), "--run-id", "f"],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **QUICK},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "f"
    raw = records.load(run / records.RESULTS)
    assert sorted((r["spec"]["batch_size"], records.is_idiomatic(r)) for r in raw) == [
        (8, False),
        (8, True),
        (16, False),
        (16, True),
    ]
    text = (run / "fidelity.md").read_text()
    assert "| torch-eager | 8 " in text and "| torch-eager | 16 " in text and "`fidelity.torch_loop`" in text
    assert "(script)" not in report_text(run), "scripts are not rows of the matrix report"
    assert "fidelity:" in proc.stdout

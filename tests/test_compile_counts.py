"""A trace or compile count an adapter does not report reads "not reported", never 0 (issue 46).

``Adapter.compile_stats`` may leave ``traces`` or ``compiles`` out (docs/adding-an-adapter.md,
section 5). ``harness check`` then says so, and never passes a static graph's recompile check on no
evidence; the report's tables keep such a cell's row with its counts "not reported".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from adapters import AdapterInfo
from adapters.base import Adapter
from harness.checks import conformance
from harness.reporting import static_dynamic
from harness.reporting.formatting import NOT_REPORTED, compiles_text
from harness.reporting.workload_tables import workload_table
from harness.running import cell_work, worker
from tests.fakes import record
from tests.test_summary_compare_sweep import timed
from tests.test_workload_tables import workload_section
from workloads import optim

MLP = ("mlp", tuple(conformance.CHECK_OVERRIDES))
RECOMPILE = "compiles once per input shape"


class StaticNumpy(Adapter):
    """The NumPy reference (docs/adding-an-adapter.md's example) declared a static graph, with no
    compile counts: ``compile_stats`` is the base class's empty dict."""

    name = "static-numpy"
    framework = "numpy"
    graph = "static"
    requires = ()
    families = ("mlp",)

    def version(self):
        return {"numpy": np.__version__}

    def resolve_device(self, device):
        return "cpu"

    def setup(self, spec, params, device, options):
        self.spec, self.p, self.steps = spec, {k: v.astype(np.float64) for k, v in params.items()}, 0
        self.opt = optim.make(spec.optimizer, spec.learning_rate, self.p)

    def to_device(self, batch):
        return batch

    def train_step(self, batch):
        loss, grads = self.spec.reference_loss_and_grads(self.p, batch)
        self.opt.apply(self.p, grads)
        self.steps += 1
        return loss

    def sync(self, handle):
        return float(handle)

    def params(self):
        return {k: v.astype(np.float32) for k, v in self.p.items()}

    def settings(self):
        return {"optimizer_kernel": f"workloads.optim.{self.spec.optimizer} (NumPy float64)"}


class TracesOnly(StaticNumpy):
    """Counts traces (one, in its first step) but not compiles, as tf.function does."""

    name = "traces-only"

    def compile_stats(self) -> dict[str, Any]:
        return {"traces": min(self.steps, 1), "compile_s": 0.01}


class RetracesOnly(TracesOnly):
    """Counts traces but not compiles, and traces again in every step: a recompiling graph."""

    name = "retraces-only"

    def compile_stats(self) -> dict[str, Any]:
        return {"traces": self.steps}


def info(cls: type[Adapter]) -> AdapterInfo:
    return AdapterInfo(cls.name, cls.framework, cls.graph, __name__, cls, None)


def checked(cls: type[Adapter], monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """What ``harness check``'s worker writes for ``cls`` on the mlp variant, run in this process."""
    monkeypatch.setattr(cell_work, "discover", lambda: {cls.name: info(cls)})  # prepare() discovers there
    cell = conformance.check_cell(info(cls), MLP) | {"threads": 1}
    return worker.check(cell, conformance.check_steps(conformance.spec_of(MLP)), conformance.SNAPSHOT)


def verdicts(result: dict[str, np.ndarray]) -> dict[str, conformance.Check]:
    return {c.name: c for c in conformance.evaluate(conformance.spec_of(MLP), result)}


def test_a_static_graph_that_reports_no_counts_is_skipped_with_its_reason_never_passed(monkeypatch):
    result = checked(StaticNumpy, monkeypatch)
    assert "step_compiles" not in result and result[conformance.COMPILE_KEYS].size == 0
    found = verdicts(result)
    recompile = found.pop(RECOMPILE)
    assert recompile.skipped and not recompile.passed and recompile.verdict == "SKIP"
    assert recompile.detail.startswith("traces and compiles not reported")
    assert "'traces'" in recompile.detail and "'compiles'" in recompile.detail, "names the missing keys"
    assert "0 compiles" not in recompile.detail and "0 traces" not in recompile.detail
    failed = [f"{c.name}: {c.detail}" for c in found.values() if not c.passed]
    assert found and not failed, "the NumPy reference passes every other check: the skip is the counts' alone"
    lines, bad = conformance.report_lines(info(StaticNumpy), {MLP: result})
    label = f"static-numpy / {conformance.variant_id(MLP)}"
    assert f"SKIP  {label}: {RECOMPILE}: traces and compiles not reported" in "\n".join(lines)
    assert not any(line.startswith("PASS") and RECOMPILE in line for line in lines), "no pass on no evidence"
    assert bad == 0, "not reported is no failure either"


def test_a_count_left_out_reads_not_reported_never_0(monkeypatch):
    result = checked(TracesOnly, monkeypatch)
    assert list(result[conformance.COMPILE_KEYS]) == ["traces"]
    steps = len(result["losses"])
    recompile = verdicts(result)[RECOMPILE]
    assert recompile.passed and recompile.verdict == "PASS", recompile.detail
    assert recompile.detail.startswith(f"1 traces over {steps} steps (compiles not reported), none after")
    assert "0 compiles" not in recompile.detail


def test_a_graph_counting_traces_alone_still_fails_when_it_traces_again(monkeypatch):
    recompile = verdicts(checked(RetracesOnly, monkeypatch))[RECOMPILE]
    assert not recompile.passed and not recompile.skipped and recompile.verdict == "FAIL"
    assert "(compiles not reported) with 1 distinct input shape" in recompile.detail
    assert "steps 2, 3, 4, 5, 6 ... compiled again" in recompile.detail


def test_a_result_that_names_no_counts_is_judged_on_both_as_before():
    """A result with ``step_compiles`` and no ``compile_keys`` (written before they were named)."""
    spec = conformance.spec_of(MLP)
    once = np.zeros((6, 2), dtype=np.int64)
    once[0] = 1
    assert conformance.reported_counts({"step_compiles": once}) == conformance.COMPILE_COUNTS
    found = conformance.compile_check(spec, once)
    assert found.passed and found.detail.startswith("1 traces, 1 compiles over 6 steps, none after")
    assert conformance.compile_check(spec, once, ()).skipped, "neither reported: no verdict from zeros"


def test_compiles_text_never_prints_a_count_the_adapter_did_not_report():
    assert compiles_text(record("x", traces=None, compiles=None, compile_s=None)) == NOT_REPORTED
    assert compiles_text(record("x")) == NOT_REPORTED, "a record without the keys at all"
    assert compiles_text(record("x", compile_s=0.9)) == "counts not reported, 0.9 s"
    assert compiles_text(record("x", traces=1, compile_s=0.229)) == "1 traces, compiles not reported, 0.229 s"
    assert compiles_text(record("x", traces=0, compiles=0, compile_s=0.0)) == "0 traces, 0 compiles, 0 s"


def test_the_compile_cost_table_keeps_a_static_cell_that_reports_no_counts():
    eager = timed("torch-eager", 10.0, graph="dynamic", cold_times_s=[0.01] * 4, cold_s=0.04)
    quiet = timed(
        "static-numpy",
        5.0,
        seed=3,
        graph="static",
        cold_times_s=[1.0, 0.005, 0.005, 0.005],
        cold_s=1.015,
        first_step_s=0.9,
        **dict.fromkeys(("traces", "compiles", "compile_s")),  # as the worker records them: None
    )
    counted = timed("jax-jit", 5.0, seed=4, graph="static", cold_times_s=[0.5] + [0.005] * 3, cold_s=0.515)
    counted.update(traces=1, compiles=1, compile_s=0.4)
    lines = static_dynamic.compile_costs({("mlp", ()): [eager, quiet, counted]})
    rows = {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines[-2].splitlines()[2:])}
    assert set(rows) == {"static-numpy", "jax-jit"}, "the cell without counts keeps its row"
    assert rows["static-numpy"][3] == NOT_REPORTED and rows["jax-jit"][3] == "1 traces, 1 compiles, 0.4 s"
    assert rows["static-numpy"][4] == "900", "its first step, measured all the same"
    assert rows["static-numpy"][7].startswith("after "), "and when it pays off"
    assert "`not reported` where the adapter's `compile_stats` leaves one out" in "\n".join(lines)


def test_workload_tables_print_not_reported_beside_counted_cells_and_drop_a_column_of_it():
    quiet = record("static-numpy", median_ms=2.0, graph="static")
    counted = record("jax-jit", median_ms=1.0, graph="static", traces=2, compiles=2, compile_s=0.5)
    _, details = workload_section("\n" + workload_table([quiet, counted]) + "\n## end", "| adapter")
    by_adapter = {row["adapter"]: row["traces / compiles"] for row in details}
    assert by_adapter == {"jax-jit": "2 traces, 2 compiles, 0.5 s", "static-numpy": NOT_REPORTED}
    _, details = workload_section("\n" + workload_table([quiet]) + "\n## end", "| adapter")
    assert "traces / compiles" not in details[0], "a column no cell reports says nothing: left out"


def test_the_compile_table_says_which_first_steps_met_a_compiler_cache():
    """The 2026-11-24 ops-profile run's torch-compile first step was 1.5 s where the default run's
    was 17 s: its records do not say whether Inductor's on-disk cache was on, and the report must."""
    base = {"graph": "static", "status": "ok"}
    cold_run_cache = {
        **base,
        "adapter": "jax-jit",
        "framework": "jax",
        "compile_cache_dir": "/tmp/c",
        "warm_compiles": False,
    }
    cold_run_cache["settings"] = {"persistent_compile_cache": True}
    later = {**cold_run_cache, "warm_compiles": True}
    off = {**base, "adapter": "torch-compile", "framework": "torch", "settings": {"inductor_caches": False}}
    tf = {**base, "adapter": "tf-function", "framework": "tensorflow", "settings": {}}
    kept = {**base, "adapter": "flax-nnx", "framework": "flax", "settings": {"persistent_compile_cache": True}}
    old = {**base, "adapter": "torch-compile", "framework": "torch", "settings": {}}
    kinds = [static_dynamic.compiler_cache(r) for r in (cold_run_cache, later, off, tf, kept, old)]
    assert kinds == ["cold", "warm", "cold", "cold", "kept", "unrecorded"]
    note = static_dynamic.cache_note([cold_run_cache, off, tf])
    assert note.startswith("First steps and compiles are cold for jax-jit, tf-function, torch-compile")
    assert "may read low" not in note
    note = static_dynamic.cache_note([tf, kept, old])
    assert "flax-nnx compiled with a cache kept between runs" in note
    assert "The records of torch-compile do not say whether a compiler cache was on" in note
    assert static_dynamic.cache_note([]) == ""


def test_each_loop_strategy_is_set_against_the_same_adapters_exact_cell():
    """Seed question (b): what bucketing or padding saves against exact shapes, per adapter, with an
    interval (different strategies ran in different groups: unpaired)."""
    from harness.stats.cells import combine_all
    from tests.fakes import as_rounds
    from tests.fakes import record as fake

    def cell(strategy_name: str, ms: float) -> list[dict]:
        rec = fake(
            "jax-jit", workload="rnn-caption", median_ms=ms, graph="static", overrides=[f"strategy={strategy_name}"]
        )
        rounds = as_rounds(rec, drift=(1.0, 1.02, 0.98))
        return [{**r, "group": f"rnn-caption|strategy={strategy_name}", "batch_size": 32} for r in rounds]

    exact, padded = combine_all(cell("exact", 10.0) + cell("padded", 5.0))
    assert static_dynamic.vs_exact(exact, exact) == "baseline"
    text = static_dynamic.vs_exact(padded, exact)
    assert text.startswith("0.50 [") and "unresolved" not in text, text
    assert static_dynamic.vs_exact(padded, None) == static_dynamic.DASH


def test_the_method_says_which_xla_compiles_the_runs_cache_kept_as_the_records_say():
    """Runs before the floor was recorded used 1 s or 0.1 s: their Method must not pick one."""
    from harness.reporting import sections

    recorded = [{"settings": {"persistent_cache_min_compile_s": 0.1}}, {"settings": {}}]
    assert sections._xla_floor(recorded) == "under 0.1 s"
    unrecorded = sections._xla_floor([{"settings": {"persistent_compile_cache": True}}, {}])
    assert "1 s" in unrecorded and "0.1 s" in unrecorded and "do not say which" in unrecorded

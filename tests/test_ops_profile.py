"""--profile-ops: the taxonomy on recorded profiler samples, the breakdown's arithmetic (categories
plus uncovered time sum to the step), the report section, and a default run left unchanged.

The samples in tests/profiles/ are one profiled mlp step of each adapter on CPU, cut from traces
the profilers wrote here (torch.profiler's Chrome trace, JAX's trace.json, TF's XSpace as rows)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import pytest

from harness.measuring import profilers
from harness.measuring.breakdown import Event, breakdown
from harness.reporting import ops
from harness.running import cell_work, worker
from harness.stats import taxonomy

SAMPLES = Path(__file__).parent / "profiles"


def _sample(name: str):
    with gzip.open(SAMPLES / f"{name}.json.gz", "rt") as f:
        return json.load(f)


def _read(name: str) -> list[Event]:
    data = _sample(name)
    if data["profiler"] == "torch":
        return profilers.read_torch(data["trace"])
    if data["profiler"] == "jax":
        return profilers.read_xla(data["trace"])
    return profilers.read_tf([tuple(row) for row in data["rows"]])


SAMPLE_NAMES = sorted(p.name.removesuffix(".json.gz") for p in SAMPLES.glob("*.json.gz"))


def test_every_profiler_has_a_recorded_sample():
    profilers_seen = {_sample(n)["profiler"] for n in SAMPLE_NAMES}
    assert profilers_seen == {"torch", "jax", "tensorflow"}


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_op_of_a_recorded_step_has_a_named_category(name):
    events = _read(name)
    assert sum(e.kind == "step" for e in events) == 1
    unnamed = sorted({e.name for e in events if e.kind in ("op", "kernel") and e.category == taxonomy.OTHER})
    assert unnamed == [], f"{name}: ops no rule of harness.stats.taxonomy knows"


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_a_recorded_step_breaks_down_to_its_wall_time(name):
    found = breakdown(_read(name))
    assert set(found["shares"]) == set(taxonomy.CATEGORIES)
    assert math.isclose(sum(found["shares"].values()), 1.0, rel_tol=1e-9)
    assert math.isclose(sum(found["seconds"].values()), found["step_s"], rel_tol=1e-9)
    assert found["shares"][taxonomy.UNCOVERED] >= 0
    assert found["shares"][taxonomy.MATMUL] > 0  # an mlp step runs its matmuls
    assert found["shares"][taxonomy.COMPILE] == 0  # a warm step compiles nothing: running compiled code is not
    assert found["ops_per_step"] >= 1
    assert [t["share"] for t in found["top_ops"]] == sorted((t["share"] for t in found["top_ops"]), reverse=True)


@pytest.mark.parametrize(
    ("family", "name", "category"),
    [
        (taxonomy.TORCH, "aten::addmm", taxonomy.MATMUL),
        (taxonomy.TORCH, "aten::mm", taxonomy.MATMUL),
        (taxonomy.TORCH, "aten::_log_softmax", taxonomy.NORM),
        (taxonomy.TORCH, "aten::sum", taxonomy.REDUCTION),
        (taxonomy.TORCH, "aten::t", taxonomy.MOVEMENT),
        (taxonomy.TORCH, "aten::threshold_backward", taxonomy.ELEMENTWISE),
        (taxonomy.TORCH, "aten::_foreach_add_", taxonomy.OPTIMIZER),
        (taxonomy.TORCH, "c10d::allreduce_", taxonomy.COLLECTIVE),
        (taxonomy.XLA, "ynn_fusion.3", taxonomy.MATMUL),
        (taxonomy.XLA, "dot.2", taxonomy.MATMUL),
        (taxonomy.XLA, "broadcast_maximum_fusion.1", taxonomy.ELEMENTWISE),
        (taxonomy.XLA, "add_reduce_fusion", taxonomy.REDUCTION),
        (taxonomy.XLA, "bitcast_concatenate_fusion", taxonomy.MOVEMENT),
        (taxonomy.XLA, "all-reduce.1", taxonomy.COLLECTIVE),
        (taxonomy.TF, "Relu:_MklNativeFusedMatMul", taxonomy.MATMUL),
        (taxonomy.TF, "EagerLocalExecute: Maximum", taxonomy.ELEMENTWISE),
        (taxonomy.TF, "x/Max:Max", taxonomy.REDUCTION),
        (taxonomy.TF, "ResourceApplyGradientDescent_4:ResourceApplyGradientDescent", taxonomy.OPTIMIZER),
        (taxonomy.TF, "MatMul/ReadVariableOp:ReadVariableOp", taxonomy.MOVEMENT),
        (taxonomy.GPU_KERNEL, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", taxonomy.MATMUL),
        (taxonomy.GPU_KERNEL, "void at::native::vectorized_elementwise_kernel<4, ...>", taxonomy.ELEMENTWISE),
        (taxonomy.GPU_KERNEL, "Memcpy HtoD (Pageable -> Device)", taxonomy.MOVEMENT),
        (taxonomy.GPU_KERNEL, "void at::native::reduce_kernel<512, 1, ...>", taxonomy.REDUCTION),
        (taxonomy.TORCH, "aten::frobnicate", taxonomy.OTHER),
        # seen in the cnn and rnn-caption steps
        (taxonomy.TORCH, "aten::convolution_backward", taxonomy.MATMUL),
        (taxonomy.TORCH, "aten::max_pool2d_with_indices_backward", taxonomy.REDUCTION),
        (taxonomy.TORCH, "aten::gru_cell", taxonomy.ELEMENTWISE),
        (taxonomy.TORCH, "aten::narrow", taxonomy.MOVEMENT),
        (taxonomy.XLA, "wrapped_reduce-window", taxonomy.REDUCTION),
        (taxonomy.XLA, "dynamic-slice_bitcast_fusion", taxonomy.MOVEMENT),
        (taxonomy.TF, "_MklNativeConv2DBackpropFilter", taxonomy.MATMUL),
        (taxonomy.TF, "gradient_tape/MaxPoolGrad:MaxPoolGrad", taxonomy.REDUCTION),
        (taxonomy.TF, "StridedSliceGrad", taxonomy.MOVEMENT),
    ],
)
def test_taxonomy_rules(family, name, category):
    assert taxonomy.classify(family, name) == category


def test_an_unknown_profiler_family_is_an_error():
    with pytest.raises(ValueError, match="unknown profiler family"):
        taxonomy.classify("mxnet", "dot")


def test_self_time_counts_once_and_scopes_cover_nothing():
    events = [
        Event("step", profilers.STEP, 0, 100, "t"),
        Event("op", "aten::linear", 10, 50, "t", taxonomy.MATMUL),
        Event("op", "aten::t", 12, 20, "t", taxonomy.MOVEMENT),  # nested: its 8 us are not the linear's
        Event("scope", "Optimizer.step#SGD.step", 60, 90, "t", taxonomy.OPTIMIZER),
        Event("op", "aten::add_", 65, 75, "t", taxonomy.ELEMENTWISE),  # inside the optimizer: an update
    ]
    found = breakdown(events)
    seconds = {k: v * 1e6 for k, v in found["seconds"].items()}
    assert seconds[taxonomy.MATMUL] == pytest.approx(32)
    assert seconds[taxonomy.MOVEMENT] == pytest.approx(8)
    assert seconds[taxonomy.OPTIMIZER] == pytest.approx(10)
    assert seconds[taxonomy.ELEMENTWISE] == 0
    assert seconds[taxonomy.UNCOVERED] == pytest.approx(50)  # the scope's own 20 us among it
    assert found["ops_per_step"] == 2  # linear and add_: the t inside linear was not launched from Python
    assert found["top_ops"][0] == {
        "name": "aten::linear",
        "category": taxonomy.MATMUL,
        "s_per_step": pytest.approx(32e-6),
        "share": pytest.approx(0.32),
        "calls_per_step": 1,
    }


def test_overlapping_threads_share_an_instant_and_time_outside_steps_is_left_out():
    events = [
        Event("step", profilers.STEP, 0, 10, "main"),
        Event("step", profilers.STEP, 20, 30, "main"),
        Event("op", "dot", 0, 10, "a", taxonomy.MATMUL),
        Event("op", "add", 5, 10, "b", taxonomy.ELEMENTWISE),  # 5 us beside the dot: 2.5 us each
        Event("op", "copy", 12, 18, "a", taxonomy.MOVEMENT),  # between steps: not the step's
        Event("op", "dot", 20, 24, "a", taxonomy.MATMUL),
    ]
    found = breakdown(events)
    seconds = {k: v * 1e6 for k, v in found["seconds"].items()}
    assert found["steps"] == 2 and found["step_s"] == pytest.approx(10e-6)
    assert seconds[taxonomy.MATMUL] == pytest.approx((7.5 + 4) / 2)
    assert seconds[taxonomy.ELEMENTWISE] == pytest.approx(2.5 / 2)
    assert seconds[taxonomy.MOVEMENT] == 0
    assert seconds[taxonomy.UNCOVERED] == pytest.approx(6 / 2)
    assert found["ops_per_step"] == 1.5


def test_kernels_give_the_device_busy_share_and_the_mean_gap():
    events = [
        Event("step", profilers.STEP, 0, 100, "host"),
        Event("op", "aten::mm", 0, 90, "host", taxonomy.MATMUL),  # host ops: not the device's timeline
        Event("kernel", "gemm", 10, 30, "stream 7", taxonomy.MATMUL),
        Event("kernel", "elementwise_kernel", 40, 50, "stream 7", taxonomy.ELEMENTWISE),
        Event("kernel", "Memcpy DtoH", 45, 60, "stream 8", taxonomy.MOVEMENT),  # overlaps: counted once
    ]
    found = breakdown(events)
    assert found["device_busy_share"] == pytest.approx(0.40)
    assert found["kernel_gap_s"] == pytest.approx(10e-6)
    assert found["shares"][taxonomy.UNCOVERED] == pytest.approx(0.60)
    assert found["ops_per_step"] == 3


def test_a_profile_without_step_windows_is_refused():
    with pytest.raises(ValueError, match="no step windows"):
        breakdown([Event("op", "dot", 0, 1, "t", taxonomy.MATMUL)])


def test_the_profiler_is_picked_by_what_the_adapter_requires():
    assert profilers.profiler_of(("keras", "torch")) == "torch"
    assert profilers.profiler_of(("flax", "jax", "optax")) == "jax"
    assert profilers.profiler_of(("tensorflow",)) == "tensorflow"
    assert profilers.profiler_of(("mxnet",)) is None
    skipped = profilers.profile_cell(("mxnet",), None, None, [], Path("unused"), Path("unused"), 0.01)
    assert skipped["status"] == "skipped" and "no profiler" in skipped["reason"]


def test_a_default_run_gets_no_profiled_pass():
    rec = {"status": "ok", "median_s": 0.001}
    assert cell_work.ops_profile({"cell_id": "x", "round": 1}, None, rec) == {}
    assert cell_work.ops_profile({"cell_id": "x", "round": 2, "profile_ops": "/run"}, None, rec) == {}


def test_a_trace_folder_name_holds_no_path_separator():
    name = profilers.folder_name("torch-eager|mlp|cpu|data=resident|strategy=a/b")
    assert "/" not in name and "|" not in name and name.startswith("torch-eager")


def _rec(adapter: str, framework: str, graph: str, profile: dict) -> dict:
    return {
        "status": "ok",
        "adapter": adapter,
        "framework": framework,
        "graph": graph,
        "workload": "mlp",
        "device_requested": "cpu",
        "device": "cpu",
        "median_s": 0.001,
        "ops_profile": profile,
    }


def _profile(uncovered: float, ops_per_step: float) -> dict:
    shares = dict.fromkeys(taxonomy.CATEGORIES, 0.0)
    shares.update({taxonomy.MATMUL: 1 - uncovered, taxonomy.UNCOVERED: uncovered})
    return {
        "status": "ok",
        "step_s": 0.002,
        "profiled_step_s": 0.002,
        "shares": shares,
        "seconds": {k: v * 0.002 for k, v in shares.items()},
        "ops_per_step": ops_per_step,
        "top_ops": [{"name": "aten::mm", "category": taxonomy.MATMUL, "share": 0.5, "s_per_step": 0.001}],
        "trace": "traces/x/trace.json.gz",
    }


def test_the_report_section_says_where_each_mode_spends_its_step():
    # profiled 2 ms each; unprofiled 1.7 and 1.2 ms: the profiler's own cost 0.3 ms and 0.8 ms, at
    # most each one's uncovered time (0.8 and 0.2 ms), is taken out of uncovered
    recs = [
        _rec("torch-eager", "torch", "dynamic", {**_profile(0.4, 43), "unprofiled_step_s": 0.0017}),
        _rec("torch-compile", "torch", "static", {**_profile(0.1, 9), "unprofiled_step_s": 0.0012}),
        _rec("tf-eager", "tensorflow", "dynamic", {"status": "skipped", "reason": "RuntimeError: no profiler"}),
        {**_rec("jax-jit", "jax", "static", {}), "ops_profile": None},
    ]
    text = "\n".join(ops.section(recs))
    assert "## Where the time goes" in text
    assert (
        "torch-eager launches 43 ops per step and 25% (0.5 ms) of its profiled step is uncovered, "
        "15% (0.3 ms) profiler overhead; torch-compile launches 9, 0% (0 ms) uncovered, 10% (0.2 ms) profiler overhead"
    ) in text
    # the profiled gap is never called the modes' difference without the unprofiled steps beside it,
    # and the sentence quotes only what the table prints (no difference of its own computing)
    assert "profiled step holds more outside any op, its profiler overhead apart" in text
    assert "(unprofiled, the whole steps take 1.7 and 1.2 ms)" in text
    assert "more per step outside any op" not in text
    assert "**tf-eager**: no breakdown (RuntimeError: no profiler)" in text
    assert "[torch-eager](traces/x/trace.json.gz)" in text
    assert "jax-jit" not in text  # not profiled: not in the section
    row = next(line for line in text.splitlines() if line.startswith("| torch-eager"))
    header = next(line for line in text.splitlines() if line.startswith("| adapter") and "ops/step" in line)
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")], strict=True))
    assert (cells["matmul/conv"], cells["uncovered"], cells["profiler overhead"]) == (
        "60%",
        "25% (0.5 ms)",
        "15% (0.3 ms)",
    )
    assert cells["unprofiled ms/step"] == "1.7"


def test_the_profilers_own_cost_is_its_own_bar_and_never_more_than_the_uncovered_time():
    rec = _rec("jax-eager", "jax", "dynamic", {**_profile(0.1, 100), "unprofiled_step_s": 0.001})
    split = ops.split_seconds(rec)  # 1 ms of overhead by the steps, 0.2 ms uncovered: capped
    assert split[ops.PROFILER] == pytest.approx(0.0002) and split[taxonomy.UNCOVERED] == 0.0
    assert sum(split.values()) == pytest.approx(0.002)  # still sums to the profiled step
    faster = _rec("jax-jit", "jax", "static", {**_profile(0.1, 9), "unprofiled_step_s": 0.003})
    assert ops.split_seconds(faster)[ops.PROFILER] == 0.0  # profiled no slower: nothing to take out


def test_the_unprofiled_step_beside_the_profiled_one_is_the_same_rounds():
    # The record's median may be another round's (or the rounds' combination): the profiler's
    # overhead is read against the step the same process timed just before its profiled pass.
    profile = {**_profile(0.1, 9), "profiled_step_s": 0.0025, "unprofiled_step_s": 0.002}
    table = ops.shares_table([{**_rec("torch-compile", "torch", "static", profile), "median_s": 0.004}])
    row = next(line for line in table.splitlines() if line.startswith("| torch-compile"))
    assert [c.strip() for c in row.split("|")[2:4]] == ["2.5", "2"]


def test_a_profile_that_disagrees_with_the_floors_is_said():
    bound = {
        **_rec("jax-eager", "jax", "dynamic", _profile(0.8, 100)),
        "kernel_floor_s": 2e-3,
        "dispatch_floor_s": 1e-3,
    }
    agrees = {**_rec("jax-jit", "jax", "static", _profile(0.1, 30)), "kernel_floor_s": 2e-3, "dispatch_floor_s": 1e-3}
    assert ops.floor_disagreements([bound, agrees]) == [
        "jax-eager is compute-bound by its floors (kernel floor 2 ms >= dispatch floor 1 ms), "
        "yet 80% of its profiled step is outside any op."
    ]


def test_no_profiled_cell_no_section():
    assert ops.section([_rec("torch-eager", "torch", "dynamic", None)]) == []


def test_the_sum_rule_on_a_real_profiled_cell(tmp_path):
    pytest.importorskip("torch")
    from adapters import discover
    from harness.running.plan import plan

    cell = plan(discover(), "torch-eager", "mlp", "cpu", [], "quick", 1, "t")[0]
    s = cell_work.start(cell)
    for i in range(3):  # warm: the first steps allocate
        s.adapter.sync(s.step(s.inputs[i % len(s.inputs)]))
    found = profilers.profile_cell(("torch",), s.step, s.adapter.sync, s.inputs, tmp_path / "t", tmp_path, 0.01)
    assert found["status"] == "ok", found.get("reason")
    assert math.isclose(sum(found["seconds"].values()), found["step_s"], rel_tol=1e-9)
    assert found["shares"][taxonomy.UNCOVERED] >= 0
    assert found["steps"] == profilers.pass_steps(0.01)
    assert (tmp_path / found["trace"]).is_file()
    with gzip.open(tmp_path / found["trace"], "rt") as f:
        assert any(e.get("name") == profilers.STEP for e in json.load(f)["traceEvents"])


@pytest.mark.parametrize("flag", [[], ["--profile-ops"]])
def test_only_profile_ops_asks_the_cells_for_a_profiled_pass(flag, tmp_path):
    from adapters import discover
    from harness import cli, session

    argv = ["bench", "--framework", "torch-eager", "--workload", "mlp", "--out", str(tmp_path), *flag]
    args = cli.parser().parse_args(argv)
    run_dir, run = session.new_run(args, discover())
    wanted = {str(run_dir.resolve())} if flag else {None}
    assert {c.get("profile_ops") for c in run.cells} == wanted


def test_xla_control_flow_is_a_scope_its_body_ops_count():
    def x(name, ts, dur, hlo=None):
        return {
            "ph": "X",
            "pid": 1,
            "tid": 2,
            "name": name,
            "ts": ts,
            "dur": dur,
            **({"args": {"hlo_op": hlo}} if hlo else {}),
        }

    trace = {"traceEvents": [x(profilers.STEP, 0, 100), x("while.3", 10, 80, "while.3"), x("dot.1", 20, 30, "dot.1")]}
    events = profilers.read_xla(trace)
    assert [(e.kind, e.name) for e in events] == [("step", profilers.STEP), ("scope", "while"), ("op", "dot")]
    found = breakdown(events)
    assert found["seconds"][taxonomy.MATMUL] == pytest.approx(30e-6)
    assert found["seconds"][taxonomy.UNCOVERED] == pytest.approx(70e-6)


def test_a_one_shot_cell_times_its_floor_before_its_profiled_pass(monkeypatch):
    # The dispatch floor is a timing: the profiler must not run before it (it perturbs timing).
    calls = []
    fields = {f.name: None for f in dataclasses.fields(cell_work.Started)}
    adapter = type("Adapter", (), {"sync": None})()
    started = cell_work.Started(**{**fields, "adapter": adapter, "pass_steps": 1, "chained": True})
    monkeypatch.setattr(worker, "start", lambda cell: started)
    monkeypatch.setattr(worker.timing, "measure", lambda *a, **k: None)
    monkeypatch.setattr(worker, "compile_count", lambda adapter: None)
    monkeypatch.setattr(worker, "finish", lambda *a: {"status": "ok"})
    monkeypatch.setattr(worker, "dispatch_floor", lambda *a: calls.append("floor") or {"dispatch_floor_s": 1.0})
    monkeypatch.setattr(worker, "ops_profile", lambda *a: calls.append("profile") or {"ops_profile": {}})
    record = worker.bench({"profile": "quick"})
    assert calls == ["floor", "profile"]
    assert record == {"status": "ok", "dispatch_floor_s": 1.0, "ops_profile": {}}

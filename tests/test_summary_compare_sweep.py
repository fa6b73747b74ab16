"""Report features on synthetic records: summary sentences, plots, sweeps, comparisons, merges."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from harness import records
from harness.reporting import breakeven, compare, model, report, static_dynamic, summary, sweeps
from tests import test_machine_fingerprint as fingerprint
from tests.conftest import FIXTURE_RUNS, REPO
from tests.fakes import as_rounds, process_levels, record, report_text


def timed(adapter, median_ms, spread=0.02, device="cpu", n=201, seed=0, **extra):
    """A cell of five processes: step times spread evenly (and shuffled) around an exact median, and
    its processes' levels scattered by a tenth of that spread around it."""
    rng = np.random.default_rng(seed)
    times = list(rng.permutation(median_ms * 1e-3 * (1 + spread * np.linspace(-1, 1, n))))
    from harness.stats.steps import summarize

    levels = process_levels(median_ms * 1e-3, spread / 10, seed)
    return record(
        adapter, device=device, step_times_s=times, process_levels=levels, **{**summarize(times, 32), **extra}
    )


def test_summary_names_a_winner_only_when_intervals_separate():
    clear = summary.winner_sentences([timed("torch-eager", 1.0), timed("jax-jit", 2.0, seed=1)])
    assert clear == [
        "On cpu, the fastest, separated from every other adapter: torch-eager on mlp (1 ms/step, 2.00x ahead of "
        "jax-jit)."
    ]
    close = summary.winner_sentences([timed("torch-eager", 1.0, 0.3, n=21), timed("jax-jit", 1.01, 0.3, n=21, seed=1)])
    assert close == [
        "On cpu, no adapter is separated from every other; unresolved at the top (the workload's table gives each "
        "interval): torch-eager and jax-jit on mlp."
    ]


def test_summary_cpu_against_gpu_and_missing_data_leaves_sentences_out():
    recs = [timed("torch-eager", 4.0), timed("torch-eager", 1.0, device="cuda", seed=2)]
    assert summary.device_sentences(recs) == [
        "CPU against GPU, same adapter: mlp: GPU faster for 1 of 1 adapters (GPU speed-up 4.00x)."
    ]
    assert summary.device_sentences(recs[:1]) == [], "no GPU record, no GPU sentence"
    one = [{**r, "process_levels": {1: r["process_levels"][1]}} for r in recs]  # one process each
    assert summary.device_sentences(one) == [
        "CPU against GPU, same adapter: mlp: unresolved for 1 of 1 adapters (GPU speed-up 4.00x)."
    ]
    skipped = record("torch-eager", device="cuda", status="skipped", reason="no CUDA device visible to torch")
    assert summary.device_sentences([recs[0], skipped]) == []
    (gap,) = summary.missing_sentences([recs[0], skipped])
    assert "skipped: torch-eager on mlp" in gap and "no GPU cells" not in gap, "a requested GPU cell is named"


def _modes(adapter, graph, dyn_ms, static_adapter, static_ms, seed=0, workload="mlp"):
    """A framework's dynamic and static cell of one workload, with cold windows."""
    framework = adapter.split("-")[0]
    cold = [0.01] * 4
    dyn = timed(
        adapter,
        dyn_ms,
        seed=seed,
        graph="dynamic",
        framework=framework,
        workload=workload,
        cold_times_s=cold,
        cold_s=0.04,
    )
    st = timed(
        static_adapter,
        static_ms,
        seed=seed + 1,
        graph="static",
        framework=framework,
        workload=workload,
        cold_times_s=[1.0] + [static_ms * 1e-3] * 3,
        cold_s=1.0 + 3 * static_ms * 1e-3,
        compile_s=0.9,
    )
    return [dyn, st]  # fmt: skip


def test_summary_static_against_dynamic_per_framework_with_break_even_range():
    recs = _modes("jax-eager", "dynamic", 10.0, "jax-jit", 5.0) + _modes(
        "jax-eager", "dynamic", 4.0, "jax-jit", 1.0, seed=4, workload="cnn"
    )
    (line,) = summary.framework_sentences(recs)
    steps = [breakeven.break_even(st, dyn) for dyn, st in (recs[:2], recs[2:])]
    assert steps[0] != steps[1], "a range over the workloads, of the break-even steps the table prints"
    assert line == (
        "jax: jax-jit is faster than jax-eager once compiled on 2 of 2 workloads (cnn, mlp: 2.00x to 4.00x), "
        f"its compiles paid off after {min(steps):,} to {max(steps):,} steps from a cold start."
    )
    tied = _modes("torch-eager", "dynamic", 5.0, "torch-compile", 5.02, seed=8)
    noisy = [timed(r["adapter"], r["median_s"] * 1e3, 0.3, n=21, seed=i) for i, r in enumerate(tied)]
    tied = [
        dict(r, step_times_s=x["step_times_s"], process_levels=x["process_levels"])
        for r, x in zip(tied, noisy, strict=True)
    ]
    slower = _modes("torch-eager", "dynamic", 2.0, "torch-compile", 3.0, seed=9, workload="cnn")
    (line,) = summary.framework_sentences(tied + slower)
    assert line == (
        "torch: torch-compile is faster than torch-eager on none of 2 workloads; the same speed within 5% on 1 (mlp) "
        "and slower on 1 (cnn: 0.67x)."
    )
    contended = [dict(r, contended=True) for r in tied]
    assert summary.framework_sentences(contended) == [], "contended cells enter no verdict"


def test_compile_cost_table_in_the_static_vs_dynamic_section():
    """The per-adapter compile sentences of earlier reports, as rows: cost, and when it pays off."""
    eager = timed("torch-eager", 10.0, graph="dynamic", cold_times_s=[0.01] * 4, cold_s=0.04)
    static = timed(
        "jax-jit", 5.0, graph="static", cold_times_s=[1.0, 0.005, 0.005, 0.005], cold_s=1.015, compile_s=0.9, seed=3
    )
    early, late = breakeven.break_even_range(static, eager)
    assert early <= breakeven.break_even(static, eager) <= late and early < late
    lines = static_dynamic.compile_costs({("mlp", ()): [eager, static]})
    assert lines[0] == "### What compiling costs"
    row = [c.strip() for c in lines[-2].splitlines()[-1].strip("|").split("|")]
    counts = "counts not reported, 0.9 s"  # the record times its compiles but counts none
    assert row == ["jax-jit", "mlp", "cpu", counts, "5", "5", "torch-eager, 10", f"after {early:,} to {late:,} steps"]
    tied = timed("jax-jit", 10.05, 0.3, n=21, graph="static", cold_times_s=[1.0] * 4, cold_s=4.0, compile_s=0.9)
    noisy = timed("torch-eager", 10.0, 0.3, n=21, seed=5, graph="dynamic", cold_times_s=[0.01] * 4, cold_s=0.04)
    lines = static_dynamic.compile_costs({("mlp", ()): [noisy, tied]})
    assert lines[-2].endswith("| unresolved (interval spans 1 and reaches past the same-speed band) |")
    assert static_dynamic.section({("mlp", ()): [eager]}) == [], "no static cell, no section"
    eager_jax = timed("jax-eager", 10.0, graph="dynamic", framework="jax", cold_times_s=[0.01] * 4, cold_s=0.04)
    lines = static_dynamic.within_frameworks({("mlp", ("batch_size=64",)): [eager_jax, static]})
    row = [c.strip() for c in lines[-2].splitlines()[-1].strip("|").split("|")]
    assert row[:2] == ["jax", "mlp (batch_size=64)"], "each row says which setting it compares"


def test_summary_input_bound_finding_where_data_modes_ran():
    resident = timed("jax-jit", 1.0)
    host = timed("jax-jit", 1.6, seed=1, data="host")
    loader = timed("jax-jit", 1.01, 0.3, n=21, seed=2, data="loader")
    (line,) = summary.input_sentences([resident, host, loader])
    assert line == (
        "Input pipeline on cpu: copying each batch from host memory slows 1 of 1 cells, by up to 1.60x (jax-jit on "
        "mlp: 38% of its step waits for input); this project's loader in each framework's input API slows none "
        "of 1 cells measurably."
    )
    assert summary.input_sentences([resident]) == []
    assert "`DATA=all`" in summary.missing_sentences([resident])[0]


def test_missing_cells_name_the_setting_they_were_skipped_for():
    ok = timed("tf-function", 1.0, workload="transformer", overrides=["strategy=exact", "attention=naive"])
    fused = record("tf-function", "transformer", "skipped", overrides=["strategy=exact", "attention=fused"])
    (line,) = summary.missing_sentences([ok, fused])
    assert "skipped: exact attention=fused for tf-function on transformer" in line


def test_summary_of_the_full_cpu_run_fits_in_eight_sentences():
    recs, _ = model.load_runs([FIXTURE_RUNS / "2026-11-25-cpu-default"])
    found = summary.sentences(recs)
    assert 4 <= len(found) <= 8
    assert sum(line.count(". ") + 1 for line in found) <= 8, "each bullet is one sentence"
    assert sum(line.startswith(("jax:", "tensorflow:", "torch:")) for line in found) == 3
    assert found[-1].startswith("Not in this run: no GPU cells")


def sweep_record(adapter, device, value, median_ms, seed):
    return timed(adapter, median_ms, device=device, seed=seed, sweep={"field": "batch_size", "value": value})


def test_crossover_is_where_the_faster_series_changes():
    series = {
        "torch-eager / cpu": [
            sweep_record("torch-eager", "cpu", v, m, i) for i, (v, m) in enumerate([(16, 1), (256, 5), (1024, 20)])
        ],
        "torch-eager / cuda": [
            sweep_record("torch-eager", "cuda", v, m, 10 + i)
            for i, (v, m) in enumerate([(16, 2), (256, 2.5), (1024, 3)])
        ],
    }
    (found,) = sweeps.crossovers(series)
    before, after = found.pop("ratios")
    assert found == {
        "before": 16,
        "after": 256,
        "faster_before": "torch-eager / cpu",
        "faster_after": "torch-eager / cuda",
    }
    assert before.outcome == after.outcome == "slower", "each the slower's time over the faster's"
    assert before.point == pytest.approx(2.0, rel=0.01) and after.point == pytest.approx(2.0, rel=0.01)
    # records without processes to read give no paired ratio: unresolved, never a crossover
    wide = {"ci_low_s": 0.0, "ci_high_s": 1.0}
    raw = ("step_times_s", "process_levels")
    unread = {k: [{**{f: x for f, x in r.items() if f not in raw}, **wide} for r in v] for k, v in series.items()}
    assert sweeps.crossovers(unread) == [], "unresolved values are never counted as a crossover"


def _write_run(path, recs, env):
    path.mkdir(parents=True)
    for r in recs:
        records.append(path / records.RESULTS, r)
    (path / records.ENV).write_text(json.dumps(env))
    return path


ENV = {
    "hostname": "box",
    "cpu": "Test CPU",
    "gpus": [],
    "peaks": {"cpu": {"matmul_gflops": 100.0, "matmul_gflops_by": "numpy", "copy_gbs": 10.0}},
}


@pytest.mark.slow
def test_sweep_section_and_plots_are_written(tmp_path):
    recs = [sweep_record("torch-eager", "cpu", v, m, i) for i, (v, m) in enumerate([(16, 1), (256, 5), (1024, 20)])]
    recs += [
        sweep_record("torch-eager", "cuda", v, m, 9 + i) for i, (v, m) in enumerate([(16, 2), (256, 2.5), (1024, 3)])
    ]
    for r in recs:
        r["overrides"] = [f"batch_size={int(r['sweep']['value'])}"]
        r["cell_id"] = f"{r['adapter']}|{r['device']}|{r['overrides'][0]}"
    run = _write_run(tmp_path / "run", [p for r in recs for p in as_rounds(r)], ENV)
    path = report.write(run)
    md = report_text(path.parent)
    assert "## Sweep: mlp over batch_size" in md
    assert "| batch_size=16 to 256 | torch-eager / cuda | torch-eager / cpu " in md
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert "mlp-sweep-batch_size.png" in pngs and any(p.endswith("-steps.png") for p in pngs)
    for name in pngs:
        assert (run / name).stat().st_size > 5000
        assert f"]({name})" in md, "every plot is embedded"


def test_sweep_table_lists_its_series_by_adapter_not_in_run_order():
    order = [("torch-eager", 16, 1), ("jax-jit", 16, 2), ("torch-eager", 256, 5), ("jax-jit", 256, 3)]
    recs = [sweep_record(a, "cpu", v, m, i) for i, (a, v, m) in enumerate(order)]
    text = "\n".join(sweeps.sweep_section(recs, None)).split("Crossovers")[0]  # the step-time table
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "series" not in line]
    assert rows == ["jax-jit / cpu", "torch-eager / cpu"]


#: Six rounds of a cell a little apart, as a machine drifts between processes.
DRIFT = (1.0, 1.01, 0.99, 1.0, 1.005, 0.995)


def compare_run(path, medians, env, **extra):
    """A run folder of one cell per (adapter, median ms) on ``mlp``, six rounds each, and ``env``
    as its env.json; ``extra`` goes into every record."""
    recs = [
        dict(timed(a, m, seed=i, **extra), cell_id=f"{a}|mlp|cpu", run_id=path.name) for i, (a, m) in enumerate(medians)
    ]
    return _write_run(path, [p for r in recs for p in as_rounds(r, DRIFT)], env)


BEFORE, AFTER = [("torch-eager", 1.0), ("jax-jit", 1.0)], [("torch-eager", 0.5), ("jax-jit", 1.0)]


def test_compare_and_merge_on_the_command_line(python, tmp_path):
    a = compare_run(tmp_path / "before", BEFORE, dict(ENV, hostname="laptop"))
    b = compare_run(tmp_path / "after", AFTER, dict(ENV, hostname="workstation"))
    proc = subprocess.run(
        [python, "-m", "harness", "compare", str(a), str(b)], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    text = (b / "compare-before.md").read_text()
    assert "2 matching cells: 1 faster, 0 slower, 1 the same speed within 5%, 0 unresolved." in text
    assert "| detectable change |" in text.replace(" ", "").replace("|detectablechange|", "| detectable change |")
    assert "- Within A: 0 pairs of cells differ by 1.5x or more; its intervals separate 0 of them." in text
    assert "- Within B: 1 pairs of cells differ by 1.5x or more; its intervals separate 1 of them." in text
    assert "Fastest verdicts: 1 groups in both runs, 1 with a named fastest in at least one, 0 contradicted" in text
    assert text.splitlines()[2].startswith(  # env.json from before the machine fingerprint: no claim of sameness
        "**Machines not known to be the same: A's env.json has no machine fingerprint (an older run): only its CPU "
        "name, cores, memory and GPUs are known; B's env.json"
    )
    merged = tmp_path / "merged"
    proc = subprocess.run(
        [python, "-m", "harness", "report", str(a), str(b), "--out", str(merged)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    md = report_text(merged)
    assert "laptop (Test CPU): cpu" in md and "workstation (Test CPU): cpu" in md
    first = (merged / "report.md").read_text()  # a report over two machines says they differ
    assert "Machines: laptop (Test CPU) and workstation (Test CPU) are not one machine kind" in first
    details = (merged / "details.md").read_text()  # report.md answers; the environments are details
    assert "## Environment: laptop (Test CPU)" in details and "## Environment: workstation (Test CPU)" in details
    bad = subprocess.run([python, "-m", "harness", "report", str(a), str(b)], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "needs --out" in bad.stderr


def machine_envs(machine_a, machine_b):
    """env.json of runs A and B with these machine fingerprints (harness.env.machine_fingerprint)."""
    return dict(ENV, hostname="vm-a", machine_kind=machine_a), dict(ENV, hostname="vm-b", machine_kind=machine_b)


def test_compare_refuses_verdicts_across_machines_unless_asked(tmp_path):
    """The issue's two 2-core VMs, both "AMD EPYC": Zen 4 against Zen 5 gets no verdicts by default."""
    env_a, env_b = machine_envs(fingerprint.machine(fingerprint.ZEN4), fingerprint.machine(fingerprint.ZEN5))
    a = compare_run(tmp_path / "before", BEFORE, env_a, kernel_floor_s=4e-4)
    b = compare_run(tmp_path / "after", AFTER, env_b, kernel_floor_s=1e-3)
    differ = (
        "CPU family 25 vs 26; CPU model 17 vs 2; microcode 0xa10113e vs 0xb002147; "
        "avx512_vp2intersect, avx_vnni only in B"
    )
    with pytest.raises(compare.DifferentMachines) as refused:
        compare.build(a, b)
    assert str(refused.value) == (
        f"before (A) and after (B) ran on different machines: {differ}. A ratio between them measures the machines "
        "as much as the code, so compare judges none; --across-machines writes the comparison anyway, its verdicts "
        "under a warning"
    )
    lines = compare.build(a, b, across_machines=True).splitlines()
    assert lines[2] == (
        f"**Different machines: {differ}.** The verdicts below were asked for across them (--across-machines): each "
        "ratio is B's machine and code against A's, so a cell `faster` or `slower` may be the machine rather than "
        "the code."
    )
    assert "2 matching cells: 1 faster, 0 slower, 1 the same speed within 5%, 0 unresolved." in lines
    peaks = "matmul 100 GFLOP/s in A, 100 in B (B / A 1.00); copy 10 GB/s in A, 10 in B (B / A 1.00)"
    assert f"- Measured peaks on cpu: {peaks}." in lines
    floors = "B / A: 2.50, the geometric mean over 2 matching cells (2.50 to 2.50)"
    assert f"- Kernel floors (each cell's matmuls and convolutions timed alone), {floors}." in lines


def test_compare_of_one_machine_kind_names_it_and_judges(tmp_path):
    zen4 = fingerprint.machine(fingerprint.ZEN4, dmi_vendor="Amazon EC2")
    a = compare_run(tmp_path / "before", BEFORE, machine_envs(zen4, zen4)[0])
    b = compare_run(tmp_path / "after", AFTER, machine_envs(zen4, zen4)[1])
    lines = compare.build(a, b).splitlines()
    assert lines[2] == (
        "Machine: the same kind in A and B: AMD EPYC (AuthenticAMD, family 25 model 17 stepping 1, microcode "
        "0xa10113e), 2 logical cores, 8.0 GiB, 19 instruction-set flags (avx2, avx512f, avx512_vnni, avx512_bf16 "
        "among them), hypervisor Amazon EC2, kernel 6.8.0-1021-aws."
    )
    assert "2 matching cells: 1 faster, 0 slower, 1 the same speed within 5%, 0 unresolved." in lines
    # one env.json, but the cells ran on cluster nodes unlike each other: no verdicts either
    node = {"cpu": "AMD EPYC", "cores": 2, "gpus": [], "driver": None}
    other = compare_run(tmp_path / "cluster", AFTER, machine_envs(zen4, zen4)[1], fingerprint=dict(node, cores=4))
    a = compare_run(tmp_path / "node", BEFORE, machine_envs(zen4, zen4)[0], fingerprint=node)
    with pytest.raises(
        compare.DifferentMachines, match="the cells ran on AMD EPYC, 2 cores in A, AMD EPYC, 4 cores in B"
    ):
        compare.build(a, other)


def test_compare_counts_fastest_verdicts_the_other_run_contradicts():
    a = [timed("torch-eager", 1.0), timed("jax-jit", 2.0, seed=1)]
    b = [timed("torch-eager", 2.0, seed=2), timed("jax-jit", 1.0, seed=3)]
    text = "\n".join(compare._verdicts(a, b))
    assert "1 groups in both runs, 1 with a named fastest in at least one, 1 contradicted" in text
    assert "| mlp        | cpu      | torch-eager  | jax-jit      | contradicted |" in text


def _transformer_cell(adapter, kind, median_ms, seed, sweep_value=None, **extra):
    overrides = ["strategy=exact", f"attention={kind}"]
    spec = {"attention": kind, "strategy": "exact", "task": "train", "batch_size": 16}
    cell = dict(workload="transformer", overrides=overrides, spec=spec, seed=seed, **extra)
    if sweep_value is not None:
        cell["sweep"] = {"field": "max_len", "value": sweep_value}
        cell["overrides"] = [*overrides, f"max_len={sweep_value}"]
    return timed(adapter, median_ms, **cell)


def test_attention_section_pairs_naive_and_fused_and_finds_the_crossover_per_adapter():
    from harness.reporting import attention

    recs = [
        _transformer_cell("torch-eager", "naive", 4.0, 0, tokens_per_s=1000.0, compiles=None),
        _transformer_cell("torch-eager", "fused", 2.0, 1, settings={"attention_kernel": "sdpa"}),
        _transformer_cell("tf-eager", "naive", 5.0, 2),
        record("tf-eager", "transformer", "skipped", reason="no fused attention kernel in TensorFlow"),
    ]
    recs[-1].update(overrides=["strategy=exact", "attention=fused"], spec={"attention": "fused", "strategy": "exact"})
    # along the sweep, naive wins at short sequences and fused from 128 on
    for i, (length, naive_ms, fused_ms) in enumerate([(32, 1.0, 2.0), (64, 2.0, 2.5), (128, 6.0, 4.0)]):
        recs += [
            _transformer_cell("jax-jit", "naive", naive_ms, 10 + i, sweep_value=length),
            _transformer_cell("jax-jit", "fused", fused_ms, 20 + i, sweep_value=length),
        ]
    md = "\n".join(attention.section(recs))
    assert "## Attention implementations" in md
    torch_row = next(line for line in md.splitlines() if line.startswith("| torch-eager"))
    assert "| 4 " in torch_row and "| 2 " in torch_row and "2.00 [1.99, 2.01]" in torch_row and "sdpa" in torch_row
    tf_row = next(line for line in md.splitlines() if line.startswith("| tf-eager"))
    assert "skipped: no fused attention kernel in TensorFlow" in tf_row
    jax_row = next(line for line in md.splitlines() if line.startswith("| jax-jit"))
    assert "fused faster from max_len=128 (naive at 64)" in jax_row
    assert attention.section([timed("torch-eager", 1.0)]) == [], "no attention setting, no section"

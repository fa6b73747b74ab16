"""Report features on synthetic records: summary sentences, plots, sweeps, comparisons, merges."""

from __future__ import annotations

import json
import subprocess

import numpy as np

from harness import records, rounds
from harness.reporting import breakeven, compare, report, summary, sweeps
from tests.conftest import REPO
from tests.fakes import record


def timed(adapter, median_ms, spread=0.02, device="cpu", n=201, seed=0, **extra):
    """Step times spread evenly (and shuffled) around an exact median."""
    rng = np.random.default_rng(seed)
    times = list(rng.permutation(median_ms * 1e-3 * (1 + spread * np.linspace(-1, 1, n))))
    from harness.stats import summarize

    return record(adapter, device=device, step_times_s=times, **{**summarize(times, 32), **extra})


def test_summary_names_a_winner_only_when_intervals_separate():
    clear = summary.fastest_sentences([timed("torch-eager", 1.0), timed("jax-jit", 2.0, seed=1)])
    assert clear == [
        "On cpu, torch-eager is the fastest for mlp (1 ms/step), 2.00x faster than the runner-up jax-jit (2 ms/step)."
    ]
    close = summary.fastest_sentences([timed("torch-eager", 1.0, 0.3, n=21), timed("jax-jit", 1.01, 0.3, n=21, seed=1)])
    assert len(close) == 1 and "are tied for fastest on mlp" in close[0] and "faster than" not in close[0]


def test_summary_gpu_vs_cpu_and_missing_data_leaves_sentences_out():
    recs = [timed("torch-eager", 4.0), timed("torch-eager", 1.0, device="cuda", seed=2)]
    assert summary.gpu_vs_cpu_sentences(recs) == [
        "For mlp with torch-eager, the GPU beats the CPU 4.00x (1 ms/step vs 4 ms/step)."
    ]
    assert summary.gpu_vs_cpu_sentences(recs[:1]) == [], "no GPU record, no GPU sentence"
    skipped = record("torch-eager", device="cuda", status="skipped", reason="no CUDA device visible to torch")
    assert summary.gpu_vs_cpu_sentences([recs[0], skipped]) == []


def test_summary_compile_cost_and_break_even():
    eager = timed("torch-eager", 10.0, graph="dynamic", cold_times_s=[0.01] * 4, cold_s=0.04)
    static = timed(
        "jax-jit", 5.0, graph="static", cold_times_s=[1.0, 0.005, 0.005, 0.005], cold_s=1.015, compile_s=0.9, seed=3
    )
    (line,) = summary.compile_sentences([eager, static], breakeven.break_even)
    # the range comes from the ends of the 95% interval of the steady-time ratio
    _, low, high = rounds.relative(eager, static)
    early = breakeven.break_even({**static, "median_s": eager["median_s"] * low}, eager)
    late = breakeven.break_even({**static, "median_s": eager["median_s"] * high}, eager)
    assert early <= breakeven.break_even(static, eager) <= late and early < late
    assert line.startswith("jax-jit spends 0.9 s tracing/compiling on mlp (cpu; first step")
    assert line.endswith(f"paid it off against torch-eager after {early:,} to {late:,} steps (from the 95% interval).")


def test_no_break_even_where_the_steady_steps_are_tied():
    eager = timed("torch-eager", 5.0, 0.3, graph="dynamic", cold_times_s=[0.01] * 4, cold_s=0.04, n=21)
    static = timed(
        "jax-jit", 5.02, 0.3, graph="static", cold_times_s=[1.0] + [0.005] * 3, cold_s=1.015, compile_s=0.9, n=21
    )
    (line,) = summary.compile_sentences([eager, static], breakeven.break_even)
    assert line.endswith("its steady step is tied with torch-eager (5 ms/step), so it has no clear break-even.")


def test_cells_that_differ_in_any_axis_are_never_ranked_together():
    """A sweep's batch 16 and batch 32 cells, or fp32 and tf32 cells, are separate sentences."""
    recs = [
        timed("jax-jit", 1.0, overrides=["batch_size=16"]),
        timed("torch-eager", 2.0, overrides=["batch_size=32"], seed=1),
        timed("torch-eager", 1.5, overrides=["batch_size=16"], seed=2),
    ]
    found = summary.fastest_sentences(recs)
    assert len(found) == 1 and "fastest for mlp (batch_size=16)" in found[0] and "torch-eager" in found[0]


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
    assert sweeps.crossovers(series) == [
        {"before": 16, "after": 256, "faster_before": "torch-eager / cpu", "faster_after": "torch-eager / cuda"}
    ]
    # records without raw steps are compared by their intervals: overlapping ones tie
    wide = {"ci_low_s": 0.0, "ci_high_s": 1.0}
    tied = {k: [{**{f: x for f, x in r.items() if f != "step_times_s"}, **wide} for r in v] for k, v in series.items()}
    assert sweeps.crossovers(tied) == [], "ties are never counted as a crossover"


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


def test_sweep_section_and_plots_are_written(tmp_path):
    recs = [sweep_record("torch-eager", "cpu", v, m, i) for i, (v, m) in enumerate([(16, 1), (256, 5), (1024, 20)])]
    recs += [
        sweep_record("torch-eager", "cuda", v, m, 9 + i) for i, (v, m) in enumerate([(16, 2), (256, 2.5), (1024, 3)])
    ]
    for r in recs:
        r["overrides"] = [f"batch_size={int(r['sweep']['value'])}"]
        r["cell_id"] = f"{r['adapter']}|{r['device']}|{r['overrides'][0]}"
    run = _write_run(tmp_path / "run", recs, ENV)
    path = report.write(run)
    md = path.read_text()
    assert "## Sweep: mlp over batch_size" in md
    assert "- between batch_size=16 and 256: torch-eager / cuda overtakes torch-eager / cpu" in md
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert "mlp-sweep-batch_size.png" in pngs and any(p.endswith("-steps.png") for p in pngs)
    for name in pngs:
        assert (run / name).stat().st_size > 5000
        assert f"]({name})" in md, "every plot is embedded"


def test_compare_and_merge_on_the_command_line(python, tmp_path):
    def run(name, medians, host):
        recs = [dict(timed(a, m, seed=i), cell_id=f"{a}|mlp|cpu", run_id=name) for i, (a, m) in enumerate(medians)]
        return _write_run(tmp_path / name, recs, dict(ENV, hostname=host))

    a = run("before", [("torch-eager", 1.0), ("jax-jit", 1.0)], "laptop")
    b = run("after", [("torch-eager", 0.5), ("jax-jit", 1.0)], "workstation")
    proc = subprocess.run(
        [python, "-m", "harness", "compare", str(a), str(b)], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    text = (b / "compare-before.md").read_text()
    assert "2 matching cells: 1 faster, 0 slower, 1 without a significant change." in text
    assert "- Within A: 0 pairs of cells differ by 1.5x or more; its intervals separate 0 of them." in text
    assert "- Within B: 1 pairs of cells differ by 1.5x or more; its intervals separate 1 of them." in text
    assert "Fastest verdicts: 1 groups in both runs, 1 with a named fastest in at least one, 0 contradicted" in text
    merged = tmp_path / "merged"
    proc = subprocess.run(
        [python, "-m", "harness", "report", str(a), str(b), "--out", str(merged)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    md = (merged / "report.md").read_text()
    assert "laptop (Test CPU): cpu" in md and "workstation (Test CPU): cpu" in md
    assert "## Environment: laptop (Test CPU)" in md and "## Environment: workstation (Test CPU)" in md
    bad = subprocess.run([python, "-m", "harness", "report", str(a), str(b)], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "needs --out" in bad.stderr


def test_summary_says_what_it_ranks_by_and_the_pipelined_gain():
    recs = [timed("torch-eager", 2.0, pipelined_s=1.9e-3), timed("jax-jit", 1.0, seed=1, pipelined_s=0.5e-3)]
    (line,) = summary.ranking_sentences(recs)
    assert line.startswith("Verdicts rank by the synced step time (latency")
    assert line.endswith("the largest gain is jax-jit on mlp (cpu): 0.5 ms/step, 0.50x its synced steps' time.")
    windows = [timed("jax-jit", 1.0, pipelined_s=0.5e-3, synced_block_s=0.55e-3)]
    assert "0.91x its synced steps' time" in summary.ranking_sentences(windows)[0]
    slower = [timed("torch-eager", 2.0, pipelined_s=2.1e-3)]
    assert summary.ranking_sentences(slower)[0].endswith("no cell ran faster than synced.")
    assert summary.ranking_sentences([timed("torch-eager", 2.0)]) == []


def test_compare_counts_fastest_verdicts_the_other_run_contradicts():
    a = [timed("torch-eager", 1.0), timed("jax-jit", 2.0, seed=1)]
    b = [timed("torch-eager", 2.0, seed=2), timed("jax-jit", 1.0, seed=3)]
    text = "\n".join(compare._verdicts(a, b))
    assert "1 groups in both runs, 1 with a named fastest in at least one, 1 contradicted" in text
    assert "| mlp        | cpu      | torch-eager  | jax-jit      | contradicted |" in text

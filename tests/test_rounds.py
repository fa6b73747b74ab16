"""Rounds: interleaved order, resume, and statistics over fresh processes (synthetic records).

The verdict rules themselves are tested against simulated data with known answers in
tests/test_stats_verdicts.py."""

from __future__ import annotations

import numpy as np
import pytest

from harness.reporting import summary
from harness.running import rounds
from harness.stats import cells as stat_cells
from harness.stats import inference, verdicts
from harness.stats.steps import summarize
from tests.fakes import record


def cells(n: int) -> list[dict]:
    return [{"cell_id": f"c{i}", "run_id": "r"} for i in range(n)]


def test_every_round_of_every_cell_runs_once_interleaved_and_shuffled():
    order = rounds.schedule(cells(8), 3, "run-1")
    assert sorted((c["cell_id"], k) for c, k in order) == sorted((f"c{i}", k) for i in range(8) for k in (1, 2, 3))
    assert [k for _, k in order] == sorted(k for _, k in order), "round k of all before round k+1 of any"
    per_round = [[c["cell_id"] for c, k in order if k == r] for r in (1, 2, 3)]
    assert len({tuple(p) for p in per_round}) > 1, "each round has its own order"
    assert rounds.schedule(cells(8), 3, "run-1") == order, "the order is reproducible (resume keeps it)"


def test_resume_runs_only_missing_rounds_and_an_ended_cell_runs_no_more():
    done = [
        {"cell_id": "c0", "round": 1, "status": "ok"},
        {"cell_id": "c1", "round": 1, "status": "failed"},
        {"cell_id": "c2", "round": 1, "status": "skipped"},
    ]
    left = sorted((c["cell_id"], k) for c, k in rounds.schedule(cells(3), 2, "r", done))
    assert left == [("c0", 2)]


def steps(median: float, seed: int, n: int = 200, spread: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * (1 + spread * rng.uniform(-1, 1, n)))


def round_record(adapter: str, k: int, times: list[float], **extra) -> dict:
    return record(
        adapter,
        round=k,
        cell_id=f"{adapter}|mlp|cpu",
        step_times_s=times,
        **{k: v for k, v in summarize(times, 32).items() if k not in extra},
        batch_size=32,
        cold_s=0.1,
        host_peak_rss_bytes=100,
        **extra,
    )


def cell(adapter: str, medians: list[float], seed: int = 0, **extra) -> dict:
    return stat_cells.combine([round_record(adapter, k, steps(m, seed + k), **extra) for k, m in enumerate(medians, 1)])


def test_a_cell_is_the_geometric_mean_of_its_process_levels_and_its_interval_spans_the_rounds():
    c = cell("torch-eager", [1.0, 1.4, 1.2], gflops=10.0, gflops_max_step=12.0)
    assert c["rounds_done"] == 3 and c["round_numbers"] == [1, 2, 3]
    # the estimator every ratio is built on: a ratio is the quotient of two cells' printed steps
    assert c["median_s"] == pytest.approx(np.exp(np.mean(list(c["process_levels"].values()))))
    assert c["process_mean_median_s"] == pytest.approx(np.mean(c["round_medians_s"]))
    assert c["round_medians_s"] == pytest.approx([1.0, 1.4, 1.2], rel=0.01)
    # the interval knows the processes differ: it reaches the round medians, not +-1% around one
    assert c["ci_low_s"] < 1.01 and c["ci_high_s"] > 1.39 and c["ci_kind"] == "processes"
    assert c["process_levels"] == pytest.approx({1: np.log(1.0), 2: np.log(1.4), 3: np.log(1.2)}, abs=0.01)
    # a t interval over 3 processes (2 df), not their range
    t = inference.t_quantile(0.95, 2) * np.std(np.log(c["round_medians_s"]), ddof=1) / np.sqrt(3)
    assert c["ci_high_s"] == pytest.approx(c["median_s"] * np.exp(t))
    assert c["steps"] == 600 and c["gflops"] == 10.0 and c["gflops_max_step"] == 12.0
    # two processes: a t interval on 1 df says nothing (34.3 and 35.3 ms printed as [18.7, 64.6]), so none
    two = cell("torch-eager", [1.0, 1.4])
    assert "ci_low_s" not in two and "ci_high_s" not in two and "ci_kind" not in two
    one = cell("torch-eager", [1.0])
    assert one["ci_kind"] == "steps" and one["ci_high_s"] - one["ci_low_s"] < 0.01, "one round: within one process"


def test_a_failed_round_fails_the_cell_and_says_how_many_rounds_ran():
    ok = round_record("jax-jit", 1, steps(1.0, 0))
    failed = record("jax-jit", status="failed", reason="worker killed by SIGKILL", round=2, cell_id=ok["cell_id"])
    c = stat_cells.combine([ok, failed])
    assert c["status"] == "failed" and c["reason"] == "worker killed by SIGKILL" and c["rounds_ok"] == 1


def test_ratios_within_a_run_are_paired_by_round_so_common_drift_cancels():
    # the machine slowed by 40% and 20% in rounds 2 and 3, for both adapters alike
    a = cell("torch-eager", [1.0, 1.4, 1.2], seed=0)
    b = cell("jax-jit", [1.1, 1.54, 1.32], seed=10)
    point, low, high = verdicts.relative(a, b)
    assert point == pytest.approx(1.1, rel=0.01) and 1.0 < low < high < 1.2
    assert summary.separated(a, b), "a 10% difference is seen through 40% drift"
    v = verdicts.pair_verdict(a, b)
    assert v.outcome == "slower" and v.df == 2
    other_run = {**b, "run_id": "r2"}
    _, low_u, high_u = verdicts.relative(a, other_run)
    assert low_u < 1 < high_u, "unpaired, the same drift hides it"
    # two rounds: no verdict (a range of two values is no interval)
    two = verdicts.pair_verdict(cell("torch-eager", [1.0, 1.4]), cell("jax-jit", [1.1, 1.54], seed=10))
    assert two.outcome == "unresolved" and two.reason == verdicts.FEW_GENERATIONS
    assert two.point == pytest.approx(1.1, rel=0.01) and not two.judged


def test_cells_1_5x_apart_stay_separated_and_equal_ones_tie():
    a = cell("torch-eager", [1.0, 1.3, 0.9], seed=0)
    assert summary.separated(a, cell("jax-jit", [1.5, 1.95, 1.35], seed=20))
    assert not summary.separated(a, cell("tf-function", [1.05, 1.25, 0.9], seed=30))


def test_compare_between_runs_uses_welch_on_round_medians_not_a_bootstrap_of_two_rounds():
    # torch-compile's round medians (ms) in the committed 2-round rerun experiment: identical code
    before = cell("torch-compile", [1.037, 0.982], seed=0)
    after = cell("torch-compile", [1.074, 1.434], seed=60)
    found = verdicts.change(before, after)
    assert found.point == pytest.approx(np.sqrt(1.074 * 1.434 / (1.037 * 0.982)), rel=0.02)
    assert found.low < 1 < found.high and found.high > 2, "two processes per run say little"
    assert found.outcome == "unresolved" and found.detectable > 1, "and the comparison says so"
    # both round-by-round ratios exceed 1: a rule built from the range of two values called it slower
    assert 1.074 / 1.037 > 1 and 1.434 / 0.982 > 1


def test_compare_between_runs_is_unpaired_and_says_what_it_could_detect():
    before = cell("torch-eager", [1.0, 1.2, 1.1], seed=0)
    drifted = cell("torch-eager", [1.15, 1.05, 1.25], seed=40)
    found = verdicts.change(before, drifted)
    assert found.low < 1 < found.high, "rerun drift within what the rounds saw"
    assert found.outcome == "unresolved" and 0.2 < found.detectable < 0.5, "3 noisy rounds cannot see 10%"
    steady = cell("torch-eager", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98], seed=70)
    rerun = cell("torch-eager", [1.01, 0.99, 1.0, 1.02, 0.98, 1.0], seed=80)
    found = verdicts.change(steady, rerun)
    assert found.outcome == "same speed" and found.detectable < 0.1 and 0.95 < found.low and found.high < 1.05
    halved = cell("torch-eager", [0.5, 0.6, 0.55], seed=50)
    found = verdicts.change(before, halved)
    assert found.point == pytest.approx(0.5, rel=0.02) and found.outcome == "faster"
    assert verdicts.outcome_of(1.01, 1.2)[0] == "slower" and verdicts.outcome_of(0.8, 0.99)[0] == "faster"
    assert verdicts.outcome_of(0.96, 1.04) == ("same speed", "") and verdicts.outcome_of(0.94, 1.04)[0] == "unresolved"


def test_variable_length_steps_are_timed_per_pass_never_by_a_median_of_mixed_lengths():
    from harness.stats.steps import pass_mean

    # batch 0 is short (1 ms), batch 1 long (9 ms); a window that saw batch 0 three times as often
    times = [0.001] * 30 + [0.009] * 10
    batches = [0] * 30 + [1] * 10
    assert pass_mean(times, batches) == pytest.approx(0.005), "each batch counts once per pass"
    steady = summarize(times, 32, batches=batches)
    assert steady["median_s"] == pytest.approx(0.005)
    assert steady["ci_low_s"] == pytest.approx(0.005) and steady["ci_high_s"] == pytest.approx(0.005)
    assert summarize(times, 32)["median_s"] == pytest.approx(0.001), "the plain median would be misled"
    a = [round_record("keras-torch", k, times, pass_steps=2, step_batches=batches) for k in (1, 2)]
    c = stat_cells.combine(a)
    assert c["median_s"] == pytest.approx(0.005) and c["pass_s"] == pytest.approx(0.010)
    assert c["step_batches"] == batches * 2

"""The timing protocol and statistics, with a fake adapter and a patched clock."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.measuring.timing import Diverged, Profile, measure
from harness.stats.steps import summarize
from tests.fakes import FakeAdapter, FakeClock

PROFILE = Profile("t", 3, 10, 1000, budget_s=1.0, target_rel_iqr=0.0, rounds=1, timeout_s=10)


def run(adapter, batches, profile=PROFILE, clock=None):
    return measure(adapter.train_step, adapter.sync, batches, profile, clock or adapter.clock)


def test_first_step_and_cold_window_are_kept_apart_from_steady_steps():
    clock = FakeClock()
    costs = [5.0, 0.9, 0.9, 0.9] + [0.01] * 200  # compile-heavy first step, slow warm-up
    adapter = FakeAdapter(clock, costs)
    m = run(adapter, ["b0", "b1"])
    assert m.first_step_s == pytest.approx(5.0)
    assert m.cold_times_s == pytest.approx([5.0, 0.9, 0.9, 0.9]), "cold window = first step + warm-up"
    assert all(t == pytest.approx(0.01) for t in m.step_times_s), "warm-up leaked into timed steps"
    # budget 1 s at 0.01 s/step: the loop stops once 1 s of timed work has passed
    assert 100 <= len(m.step_times_s) <= 101
    pipelined = m.block_steps * len(m.block_times_s)
    assert adapter.syncs - len(m.block_times_s) == adapter.steps - pipelined, "every timed step is synced"
    assert adapter.batches_seen[:4] == ["b0", "b1", "b0", "b1"]


def test_a_warm_step_goes_straight_to_its_steady_window():
    """A prepared dispatch floor ran its cold window already: none is run again or reported."""
    clock = FakeClock()
    adapter = FakeAdapter(clock, [0.01] * 500)
    m = measure(adapter.train_step, adapter.sync, ["b0", "b1"], PROFILE, adapter.clock, blocks=False, warm=True)
    assert m.cold_times_s == [] and m.block_times_s == []
    assert adapter.steps == len(m.step_times_s) and 100 <= adapter.steps <= 101  # its steady window alone
    assert m.loss_first == 1.0  # the first step's loss (1 / (step + 1)): no cold step came before it


def test_min_steps_wins_over_an_exhausted_budget():
    clock = FakeClock()
    m = run(FakeAdapter(clock, [0.5]), ["b"])
    assert len(m.step_times_s) == PROFILE.min_steps


def test_cold_window_covers_every_batch_so_no_new_shape_reaches_the_steady_window():
    clock = FakeClock()
    batches = [f"b{i}" for i in range(7)]
    adapter = FakeAdapter(clock, [1.0] * 7 + [0.01])
    m = run(adapter, batches)
    assert len(m.cold_times_s) == 7 and sum(m.cold_times_s) == pytest.approx(7.0)
    assert adapter.batches_seen[:7] == batches


@pytest.mark.slow
def test_max_steps_caps_a_fast_cell():
    clock = FakeClock()
    profile = Profile("t", 0, 1, 50, budget_s=1e9, target_rel_iqr=0.0, rounds=1, timeout_s=10)
    m = run(FakeAdapter(clock, [1e-6]), ["b"], profile)
    assert len(m.step_times_s) == 50


def test_times_are_taken_after_sync():
    """An adapter whose cost lands in sync (async dispatch) is still fully timed."""
    clock = FakeClock()
    m = run(FakeAdapter(clock, [0.2]), ["b"], Profile("t", 0, 5, 5, 0.0, 0.0, 1, 10))
    assert m.step_times_s == pytest.approx([0.2] * 5)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_loss_is_divergence_with_its_step(bad):
    clock = FakeClock()
    losses = [2.0] * 7 + [bad] + [1.0] * 100
    with pytest.raises(Diverged, match="diverged at step 7"):
        run(FakeAdapter(clock, [0.01], losses), ["b"])


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0], batch_size=10)
    assert s["median_s"] == 3.0
    assert (s["q1_s"], s["q3_s"], s["iqr_s"]) == (2.0, 4.0, 2.0)
    assert s["samples_per_s"] == pytest.approx(10 / 3.0)
    assert s["noisy"] is True
    assert summarize([1.0, 1.0, 1.01, 1.0], 1)["noisy"] is False
    with pytest.raises(ValueError):
        summarize([], 1)


def test_adaptive_repetition_stops_once_the_spread_is_small():
    clock = FakeClock()
    adaptive = Profile("t", 0, 20, 1000, budget_s=1e9, target_rel_iqr=0.05, rounds=1, timeout_s=10)
    steady = run(FakeAdapter(clock, [0.01]), ["b"], adaptive)
    assert len(steady.step_times_s) == 20, "stable from the start: stops at min_steps"
    noisy_costs = [0.01, 0.02, 0.03] * 1000
    noisy = run(FakeAdapter(clock, noisy_costs), ["b"], Profile("t", 0, 20, 1000, 3.0, 0.05, 1, 10))
    assert noisy.step_times_s and sum(noisy.step_times_s) == pytest.approx(3.0, abs=0.05), "noisy: runs to budget"


def test_steady_context_wraps_only_the_steady_window():
    clock = FakeClock()
    events = []

    class Probe:
        def __enter__(self):
            events.append(("enter", adapter.steps))

        def __exit__(self, *exc):
            events.append(("exit", adapter.steps))

    adapter = FakeAdapter(clock, [0.01])
    m = measure(adapter.train_step, adapter.sync, ["a", "b", "c", "d", "e", "f", "g"], PROFILE, clock, Probe())
    assert events == [("enter", 7), ("exit", 7 + len(m.step_times_s))]


def test_median_ci_brackets_the_median():
    from harness.stats.steps import median_ci

    rng = np.random.default_rng(1)
    times = rng.normal(1.0, 0.1, 500)
    low, high = median_ci(times)
    assert low < np.median(times) < high and high - low < 0.05
    s = summarize(list(times), 1)
    assert (s["ci_low_s"], s["ci_high_s"]) == (low, high)


class CompileCounter:
    """Stands in for an adapter's compile counters: compiles on the given step numbers."""

    def __init__(self, adapter, on_steps):
        self.adapter, self.on_steps = adapter, set(on_steps)

    def __call__(self) -> int:
        return sum(1 for s in self.on_steps if s < self.adapter.steps)


def test_a_recompile_in_the_steady_window_is_kept_out_of_the_statistics():
    clock = FakeClock()
    costs = [2.0, 0.01, 0.01, 0.01] + [0.01] * 20 + [1.0] + [0.01] * 500  # step 24 recompiles
    adapter = FakeAdapter(clock, costs)
    m = measure(
        adapter.train_step, adapter.sync, ["b0", "b1"], PROFILE, clock, compiles=CompileCounter(adapter, [0, 24])
    )
    assert m.cold_settled is True
    assert m.recompile_times_s == pytest.approx([1.0])
    assert max(m.step_times_s) == pytest.approx(0.01), "the recompiled step leaked into the steady window"
    assert len(m.step_batches) == len(m.step_times_s)
    assert m.step_batches[:3] == [len(m.cold_times_s) % 2, (len(m.cold_times_s) + 1) % 2, len(m.cold_times_s) % 2]


def test_the_cold_window_waits_for_a_pass_without_compiles():
    clock = FakeClock()
    adapter = FakeAdapter(clock, [0.5] * 9 + [0.01] * 500)
    # 3 batches, compiles on steps 0..8: the first 4 steps (warm-up), then passes of 3 from step 4;
    # steps 4-6 and 7-9 compile, 10-12 is the first clean pass
    m = measure(
        adapter.train_step, adapter.sync, ["a", "b", "c"], PROFILE, clock, compiles=CompileCounter(adapter, range(9))
    )
    assert len(m.cold_times_s) == 13 and m.cold_settled is True
    assert m.recompile_times_s == [] and max(m.step_times_s) == pytest.approx(0.01)


def test_an_adapter_that_never_stops_compiling_is_bounded_and_said_so():
    clock = FakeClock()
    adapter = FakeAdapter(clock, [0.01])
    every = CompileCounter(adapter, range(100_000))
    m = measure(adapter.train_step, adapter.sync, ["a"], PROFILE, clock, compiles=every)
    assert m.cold_settled is False and m.step_times_s == []
    assert len(m.recompile_times_s) >= PROFILE.min_steps


def test_pipelined_blocks_sync_once_and_are_long_enough_to_hide_the_sync():
    from harness.measuring.timing import BLOCK_S, MIN_BLOCKS

    clock = FakeClock()
    adapter = FakeAdapter(clock, [0.01])  # the fake's cost lands in sync: a block pays its last step
    m = run(adapter, ["b0", "b1"])
    assert m.block_steps == 3 and m.block_steps * 0.01 >= BLOCK_S * 0.999
    assert len(m.block_times_s) >= MIN_BLOCKS and all(t == pytest.approx(0.01) for t in m.block_times_s)
    steady_end = len(m.cold_times_s) + len(m.step_times_s)
    assert adapter.steps == steady_end + m.block_steps * len(m.block_times_s)
    assert adapter.syncs == steady_end + len(m.block_times_s), "one sync per block"


def test_pipelined_blocks_of_variable_steps_hold_whole_passes_and_drop_recompiles():
    batches = ["a", "b", "c", "d"]
    adapter = FakeAdapter(clock := FakeClock(), [0.001])
    compiles = CompileCounter(adapter, [0])
    m = measure(adapter.train_step, adapter.sync, batches, PROFILE, clock, compiles=compiles, pass_steps=4)
    assert len(m.step_times_s) % 4 == 0, "the steady window stops on whole passes"
    assert m.block_steps % 4 == 0 and m.block_steps >= 30, "whole passes, about BLOCK_S long"
    assert m.block_recompiles == 0
    steady_end = len(m.cold_times_s) + len(m.step_times_s)
    # the same run again, compiling on the second step of the first pipelined block
    adapter = FakeAdapter(clock := FakeClock(), [0.001])
    compiles = CompileCounter(adapter, [0, steady_end + 1])
    m = measure(adapter.train_step, adapter.sync, batches, PROFILE, clock, compiles=compiles, pass_steps=4)
    assert m.block_recompiles == 1 and len(m.block_times_s) >= 4


def test_a_non_finite_loss_in_a_pipelined_block_is_divergence():
    clock = FakeClock()
    losses = [1.0] * 8 + [float("nan")] * 100  # 1 cold + 5 steady steps, then blocks of 3
    profile = Profile("t", 0, 5, 5, budget_s=0.0, target_rel_iqr=0.0, rounds=1, timeout_s=10)
    adapter = FakeAdapter(clock, [0.01], losses)
    with pytest.raises(Diverged):
        run(adapter, ["b"], profile)


def test_quantiles_of_the_sorted_window_match_numpy():
    from harness.measuring.timing import quantile

    values = sorted(np.random.default_rng(4).lognormal(size=137).tolist())
    for q in (0.0, 0.25, 0.5, 0.75, 1.0):
        assert quantile(values, q) == pytest.approx(np.percentile(values, q * 100))


def test_bootstrap_memory_is_bounded_and_the_interval_unchanged_in_substance(monkeypatch):
    from harness.stats import steps as stats

    times = np.random.default_rng(5).lognormal(-5, 0.2, size=4000)
    whole = stats.median_ci(times)
    monkeypatch.setattr(stats, "BOOTSTRAP_CHUNK", 20_000)  # 5 resamples of 4,000 at a time
    low, high = stats.median_ci(times)
    assert low < np.median(times) < high
    assert low == pytest.approx(whole[0], rel=0.01) and high == pytest.approx(whole[1], rel=0.01)


def test_independent_inference_steps_are_each_synced_at_the_end_of_a_block():
    adapter = FakeAdapter(clock := FakeClock(), [0.01])
    m = measure(adapter.train_step, adapter.sync, ["b"], PROFILE, clock, chained=False)
    assert m.block_steps == 3 and all(t == pytest.approx(0.03) for t in m.block_times_s)
    steady_end = len(m.cold_times_s) + len(m.step_times_s)
    assert adapter.syncs == steady_end + 3 * len(m.block_times_s), "every step of a block is synced"

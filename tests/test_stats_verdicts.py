"""The verdict rules (harness.stats.verdicts) against simulated data with known answers.

A group of C cells runs K generations (one fresh process per cell each), each process timed in T
blocks taken in turns. Simulated: a drift per generation (the machine, common to every cell), a
drift per turn (common to the cells of a generation), an effect per process, and noise per
block, at levels measured on this 2-core VM (issue 28): process effects ~1.5%, blocks ~5%,
generations ~15%. Identical twins must be called different at the nominal rate (A/A), known
slow-downs found at the stated power. Fixed seeds: every run of the suite sees the same data.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.stats

from harness.reporting import breakeven, compare, report
from harness.reporting import cells as report_cells
from harness.running import budget as policy
from harness.stats import cells, inference, verdicts

REPS = 2000


def simulate(
    rng: np.random.Generator,
    c: int,
    k: int,
    t: int = 20,
    reps: int = REPS,
    effects: np.ndarray | None = None,
    process: float = 0.015,
    block: float = 0.05,
    generation: float = 0.15,
    turn: float = 0.05,
    noisy: dict[int, float] | None = None,
) -> np.ndarray:
    """Block log times, shape (reps, C, K, T): cell effects (log), then the common drifts, then
    each process's effect and each block's noise (scaled per cell by ``noisy``)."""
    scale = np.ones(c)
    for cell, factor in (noisy or {}).items():
        scale[cell] = factor
    logs = np.zeros((reps, c, k, t)) + (np.zeros(c) if effects is None else effects)[None, :, None, None]
    logs += generation * rng.standard_normal((reps, 1, k, 1))
    logs += turn * rng.standard_normal((reps, 1, k, t))
    logs += process * scale[None, :, None, None] * rng.standard_normal((reps, c, k, 1))
    logs += block * scale[None, :, None, None] * rng.standard_normal((reps, c, k, t))
    return logs


def verdicts_of(blocks: np.ndarray, a: int = 0, b: int = 1, level: float = 0.95):
    """(low, high) of log time(b) / time(a) per repetition, by the module's rules on arrays."""
    levels = scipy.stats.trim_mean(blocks, cells.TRIM, axis=-1)  # L[c, k]: over the turns all cells kept
    return levels_verdicts(levels, a, b, level)


def levels_verdicts(levels: np.ndarray, a: int = 0, b: int = 1, level: float = 0.95):
    """(low, high) from process levels ``levels[rep, c, k]``: the group's prior, the pair moderated."""
    s0, d0, w = inference.group_prior(levels)
    weight = np.minimum(w[:, a], w[:, b])
    _, low, high = inference.pair_interval(levels[:, b] - levels[:, a], s0, d0, level, weight)
    return low, high


def slower(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Per repetition, whether a report prints ``slower`` for the log interval (low, high): the
    interval excludes 1 and is not wholly within 1 +- 5% (verdicts.outcome_of). Power counts this;
    false separations are counted on the interval alone, the stricter count."""
    return np.array(
        [verdicts.outcome_of(math.exp(lo), math.exp(hi))[0] == "slower" for lo, hi in zip(low, high, strict=True)]
    )


@pytest.mark.parametrize(("c", "k"), [(2, 3), (2, 5), (4, 2), (4, 3), (4, 5), (10, 2), (10, 3), (10, 5)])
def test_identical_twins_are_covered_at_the_nominal_rate(c, k):
    rng = np.random.default_rng(100 * c + k)
    low, high = verdicts_of(simulate(rng, c, k))
    coverage = np.mean((low <= 0) & (high >= 0))
    # at K = 2 the prior may add at most 1 df to the pair's 1: conservative (99%), never liberal
    assert 0.935 <= coverage <= (0.995 if k == 2 else 0.99), f"A/A coverage {coverage:.3f} at C={c}, K={k}"


def test_two_generations_never_decide_a_pair():
    """Whatever the group lends: 10 cells of 2 generations, a 2x gap, still unresolved."""
    effects = np.zeros(10)
    effects[1] = math.log(2.0)
    recs = group_records(simulate(np.random.default_rng(0), 10, 2, reps=1, effects=effects)[0])
    v = verdicts.pair_verdict(recs[0], recs[1])
    assert v.outcome == "unresolved" and v.reason == verdicts.FEW_GENERATIONS and not v.judged
    three = group_records(simulate(np.random.default_rng(0), 10, 3, reps=1, effects=effects)[0])
    assert verdicts.pair_verdict(three[0], three[1]).outcome == "slower"


@pytest.mark.parametrize(("slowdown", "power"), [(1.10, 0.80), (1.25, 0.99)])
def test_a_slowed_twin_is_found_at_the_stated_power(slowdown, power):
    rng = np.random.default_rng(int(slowdown * 100))
    effects = np.array([0.0, math.log(slowdown), 0.0, 0.0])
    low, high = verdicts_of(simulate(rng, 4, 3, effects=effects))  # 4 cells, 3 generations
    # (at K = 2 a pair whose own spread exceeds the pooled one has 1 df: 10% is found in about half)
    found = np.mean(slower(low, high))
    assert found >= power, f"a {slowdown - 1:.0%} slow-down found in {found:.1%}"
    assert np.mean(high < 0) == 0, "never called faster"


def test_a_noisier_cell_keeps_its_coverage():
    """A cell 3x noisier than its group: its pairs are judged mostly on their own spread (the cell's
    weight), so their coverage stays within a point or two of 95% (93-94% measured here: the
    prior cannot tell a noisy cell whose few processes happened to agree from a quiet one)."""
    rng = np.random.default_rng(7)
    for c, k in [(4, 3), (4, 5), (10, 5)]:
        blocks = simulate(rng, c, k, noisy={1: 3.0})
        low, high = verdicts_of(blocks)  # the noisy cell against its twin
        assert np.mean((low <= 0) & (high >= 0)) >= 0.925, f"C={c}, K={k}"
        low, high = verdicts_of(blocks, 2, 3)  # two quiet cells beside it
        assert np.mean((low <= 0) & (high >= 0)) >= 0.95


#: Process spreads of the cells of the default run of 2026-11-25 (0.3% to 18.6%, issue 43).
MEASURED_SPREADS = np.array([0.003, 0.005, 0.01, 0.015, 0.02, 0.03, 0.045, 0.06, 0.1, 0.186])


def process_levels(rng: np.random.Generator, spreads: np.ndarray, k: int, reps: int = REPS, effects=None):
    """Process levels ``L[rep, c, k]``: a drift per generation common to the group, each cell's own
    process noise, and its effect."""
    c = len(spreads)
    levels = 0.15 * rng.standard_normal((reps, 1, k)) + spreads[None, :, None] * rng.standard_normal((reps, c, k))
    return levels + (np.zeros(c) if effects is None else np.asarray(effects))[None, :, None]


@pytest.mark.parametrize("k", [3, 5])
def test_identical_cells_of_the_measured_spreads_are_separated_near_the_nominal_rate(k):
    """Ten identical cells whose processes spread as the default run's did (0.3-18.6%): averaged
    over the 45 pairs, at most the nominal rate; the worst pair (the noisiest cell's) at most about
    twice it, where the rule it replaces reached 6-7% at 95% too."""
    levels = process_levels(np.random.default_rng(30 + k), MEASURED_SPREADS, k)
    c = len(MEASURED_SPREADS)
    rates = []
    for a in range(c):
        for b in range(a + 1, c):
            low, high = levels_verdicts(levels, a, b)
            rates.append(np.mean((low > 0) | (high < 0)))
    assert np.mean(rates) <= 0.05, f"mean per-pair rate {np.mean(rates):.3f}"
    assert max(rates) <= 0.10, f"worst pair {max(rates):.3f}"


@pytest.mark.parametrize(
    ("c", "k", "level", "power"),
    [(10, 3, 0.95, 0.68), (10, 4, 0.9706, 0.80), (4, 4, 0.9706, 0.80), (10, 5, 0.9706, 0.92)],
)
def test_a_ten_percent_difference_at_three_percent_noise_is_found(c, k, level, power):
    """Moderation buys the power the hard switch threw away: a true 10% slow-down at 3% process
    noise per cell (the rule before, same simulation: 65% at C=10, K=3, 95%; 73-74% at K=4 and
    90% at K=5, 97.06%). 80% needs 4 generations at the budgeted run's 97.06%."""
    effects = np.zeros(c)
    effects[1] = math.log(1.10)
    levels = process_levels(np.random.default_rng(c * 10 + k), np.full(c, 0.03), k, effects=effects)
    found = np.mean(slower(*levels_verdicts(levels, 0, 1, level)))
    assert found >= power, f"found in {found:.2f}"


def family_of(levels: np.ndarray, level: float = 0.95) -> list[verdicts.Family]:
    """``verdicts.family`` on records made from process levels ``L[rep, c, k]`` (one record per cell)."""
    out = []
    for rep in levels:
        c, k = rep.shape
        recs = [
            {
                "run_id": "r",
                "adapter": f"a{i}",
                "group": "g",
                "status": "ok",
                "median_s": float(np.exp(rep[i]).mean()),
                "process_levels": {g + 1: float(rep[i, g]) for g in range(k)},
                "verdict_level": level,
            }
            for i in range(c)
        ]
        cells.annotate_groups([(("m", "r", None), r) for r in recs])
        out.append(verdicts.family(recs))
    return out


@pytest.mark.slow  # seconds of simulation in the test process: make test runs it, test-fast leaves it out
def test_ten_identical_cells_mark_none_different_from_the_fastest_in_most_groups():
    """Family-wise: in groups of 10 identical cells, at most 5% show any cell separated from the
    leader (the per-pair rule marked one in 38% of groups), and the leader is never named fastest."""
    levels = process_levels(np.random.default_rng(40), np.full(10, 0.03), 3, reps=400)
    fams = family_of(levels)
    any_marked = np.mean([any(v.separated for _, v in f.rivals) for f in fams])
    assert any_marked <= 0.05, f"{any_marked:.3f} of groups mark an identical cell"
    assert not any(f.fastest for f in fams)


def test_a_clear_leader_is_named_fastest_and_a_close_one_is_not():
    effects = np.log([1.0, 1.3, 1.35, 1.4])
    fams = family_of(process_levels(np.random.default_rng(41), np.full(4, 0.01), 4, reps=50, effects=effects))
    assert np.mean([f.fastest for f in fams]) >= 0.95
    effects = np.log([1.0, 1.001, 1.3, 1.4])  # two at the top, the same speed
    fams = family_of(process_levels(np.random.default_rng(42), np.full(4, 0.005), 5, reps=400, effects=effects))
    assert np.mean([f.fastest for f in fams]) <= 0.07, "named fastest about at the nominal rate (4.8% here)"
    assert np.mean([f.rivals[0][1].outcome == "same speed" for f in fams]) >= 0.9


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    assert inference.holm([0.001, 0.04, 0.012], 0.95) == [True, True, True]  # 0.001 < .05/3, .012 < .05/2, .04 < .05
    assert inference.holm([0.001, 0.06, 0.012], 0.95) == [True, False, True]
    assert inference.holm([0.02, 0.03, 0.04], 0.95) == [False, False, False]  # 0.02 > 0.05/3: stop
    assert inference.holm([0.001, 0.02, 0.3], 0.95) == [True, True, False]


def test_sequential_looks_use_pococks_levels():
    alphas = [1 - inference.pocock_level(n) for n in range(1, 6)]
    assert alphas == pytest.approx([0.05, 0.0294, 0.0221, 0.0182, 0.0158], abs=2e-4)
    with pytest.raises(ValueError):
        inference.pocock_level(0)
    # three looks at the Pocock level, stopping at the first separation: about 5% A/A overall
    rng = np.random.default_rng(11)
    blocks = simulate(rng, 4, 4)
    level = inference.pocock_level(3)
    called = np.zeros(REPS, dtype=bool)
    for looks in (2, 3, 4):
        low, high = verdicts_of(blocks[:, :, :looks], level=level)
        called |= (low > 0) | (high < 0)
    assert np.mean(called) <= 0.06


# -- on records: the same rules through combine_all --------------------------------------------


def group_records(blocks: np.ndarray, run_id: str = "r", **extra) -> list[dict]:
    """Records of a group (turns protocol) from block log times of shape (C, K, T)."""
    c, k, t = blocks.shape
    out = []
    for i in range(c):
        for g in range(k):
            times = np.exp(blocks[i, g]) * 1e-3
            out.append(
                {
                    "run_id": run_id,
                    "adapter": f"a{i}",
                    "cell_id": f"a{i}|mlp|cpu",
                    "workload": "mlp",
                    "group": "mlp|cpu",
                    "round": g + 1,
                    "status": "ok",
                    "batch_size": 32,
                    "cold_s": 0.1,
                    "step_times_s": list(times),
                    "median_s": float(np.median(times)),
                    "turn_ids": list(range(t)),
                    "turn_block_s": list(times),
                    **extra,
                }
            )
    return cells.combine_all(out)


def test_combined_records_carry_what_pairs_need_and_agree_with_the_arrays():
    rng = np.random.default_rng(3)
    blocks = simulate(rng, 4, 3, reps=1, effects=np.array([0.0, 0.1, 0.0, 0.0]))[0]
    recs = group_records(blocks)
    first = recs[0]
    assert first["group"] == "mlp|cpu" and first["group_generations"] == [1, 2, 3] and first["group_prior_var"] > 0
    assert first["group_cells"] == 4 and first["verdict_level"] == 0.95 and first["blocks"] == 20
    assert first["process_levels"] == pytest.approx(
        {g + 1: scipy.stats.trim_mean(blocks[0, g], cells.TRIM) + math.log(1e-3) for g in range(3)}
    )
    assert first["ci_kind"] == "processes" and first["ci_low_s"] < first["median_s"] < first["ci_high_s"]
    low, high = verdicts_of(blocks[None])
    v = verdicts.pair_verdict(recs[0], recs[1])
    assert (math.log(v.low), math.log(v.high)) == pytest.approx((low[0], high[0]))
    assert v.outcome == "slower" and verdicts.separated(recs[0], recs[1])
    assert verdicts.relative(recs[0], recs[1]) == (v.point, v.low, v.high)


def test_only_the_turns_every_cell_kept_count():
    blocks = simulate(np.random.default_rng(4), 3, 3, reps=1)[0]
    recs = _raw(blocks)
    for r in recs:  # cell 0 lost turn 0 to contention in every generation: a slow block, dropped
        if r["adapter"] == "a0":
            r.update({key: r[key][1:] for key in ("step_times_s", "turn_ids", "turn_block_s")})
    combined = cells.combine_all(recs)
    assert all(r["blocks"] == 19 for r in combined)
    assert combined[1]["process_levels"][1] == pytest.approx(
        scipy.stats.trim_mean(blocks[1, 0, 1:], cells.TRIM) + math.log(1e-3)
    )


def test_not_judged_one_process_few_blocks_or_a_missing_generation():
    rng = np.random.default_rng(5)
    one = group_records(simulate(rng, 4, 1, reps=1)[0])
    v = verdicts.pair_verdict(one[0], one[1])
    assert v.outcome == "unresolved" and v.reason == verdicts.ONE_PROCESS and not verdicts.separated(one[0], one[1])
    few = group_records(simulate(rng, 4, 3, t=3, reps=1, effects=np.array([0, 1.0, 0, 0]))[0])
    v = verdicts.pair_verdict(few[0], few[1])
    assert v.outcome == "unresolved" and v.reason == verdicts.FEW_BLOCKS, "even a 2.7x gap"
    blocks = simulate(rng, 4, 3, reps=1)[0]
    recs = group_records(blocks)
    partial = cells.combine_all(
        [r for r in _raw(blocks) if not (r["adapter"] == "a1" and r["round"] == 3)]  # a1 lacks generation 3
    )
    v = verdicts.pair_verdict(partial[0], partial[1])
    assert v.outcome == "unresolved" and v.reason == verdicts.MISSING_GENERATION
    assert partial[0]["group_cells"] == 3 and partial[0]["group_prior_var"] > 0, "the complete cells keep their model"
    assert verdicts.pair_verdict(partial[0], partial[2]).judged
    assert verdicts.pair_verdict(recs[0], recs[2]).judged


def _raw(blocks: np.ndarray) -> list[dict]:
    c, k, t = blocks.shape
    return [
        {
            "run_id": "r",
            "adapter": f"a{i}",
            "cell_id": f"a{i}|mlp|cpu",
            "group": "g",
            "round": g + 1,
            "status": "ok",
            "batch_size": 32,
            "cold_s": 0.1,
            "step_times_s": list(np.exp(blocks[i, g]) * 1e-3),
            "turn_ids": list(range(t)),
            "turn_block_s": list(np.exp(blocks[i, g]) * 1e-3),
        }
        for i in range(c)
        for g in range(k)
    ]


def test_older_records_group_by_setting_and_pair_across_groups_unpaired():
    rng = np.random.default_rng(6)
    blocks = simulate(rng, 3, 4, reps=1)[0]
    old = [{k: v for k, v in r.items() if k not in ("group", "turn_ids", "turn_block_s")} for r in _raw(blocks)]
    other = [{**r, "cell_id": r["cell_id"] + "|batch_size=64", "adapter": r["adapter"]} for r in old[:4]]
    recs = cells.combine_all(old + other)
    assert {r["group"] for r in recs} == {"mlp|cpu", "mlp|cpu|batch_size=64"}
    assert recs[0]["group_prior_var"] > 0 and recs[0]["blocks"] is None and recs[-1]["group_prior_var"] is None
    v = verdicts.pair_verdict(recs[0], recs[-1])
    assert v.reason == "unpaired: different groups" and v.outcome == "unresolved" and v.judged


def test_settled_means_separated_or_a_tie_within_the_margin():
    rng = np.random.default_rng(8)
    effects = np.array([0.0, 0.0, math.log(1.3), 0.0])
    recs = group_records(simulate(rng, 4, 5, t=40, reps=1, effects=effects, process=0.005)[0])
    assert verdicts.settled(recs[0], recs[2]), "separated"
    v = verdicts.pair_verdict(recs[0], recs[1])
    assert v.outcome == "same speed" and 0.95 < v.low and v.high < 1.05 and verdicts.settled(recs[0], recs[1])
    loose = group_records(simulate(rng, 4, 2, reps=1, process=0.1)[0])
    v = verdicts.pair_verdict(loose[0], loose[1])
    assert v.outcome == "unresolved" and not v.settled, "a wide interval could hide a real difference"


def test_a_difference_under_the_margin_reads_same_speed_even_where_the_interval_excludes_1():
    # A cell 2% slower in every generation (identical code in fresh processes has measured so, persisting
    # across generations): the interval excludes 1 but lies within 1 +- 5%, so no report claims it.
    assert verdicts.outcome_of(1.01, 1.04) == ("same speed", "") and verdicts.outcome_of(0.96, 0.99)[0] == "same speed"
    assert verdicts.outcome_of(1.01, 1.06)[0] == "slower" and verdicts.outcome_of(0.94, 0.99)[0] == "faster"
    rng = np.random.default_rng(21)
    effects = np.array([0.0, math.log(1.02), math.log(1.15), math.log(1.3)])
    recs = group_records(simulate(rng, 4, 5, t=40, reps=1, effects=effects, process=0.002, generation=0.0)[0])
    v = verdicts.pair_verdict(recs[0], recs[1])
    assert v.low > 1 and v.high < 1 + verdicts.SETTLE_MARGIN, "the setting makes the 2% sure"
    assert v.outcome == "same speed" and v.settled and not v.separated
    assert verdicts.pair_verdict(recs[0], recs[2]).outcome == "slower", "15% is past the margin"
    fam = verdicts.family(recs)
    assert fam.leader is recs[0] and not fam.fastest, "a rival within 5% of the leader: no fastest"
    assert {r["adapter"]: v.outcome for r, v in fam.rivals}[recs[2]["adapter"]] == "slower"


def test_a_workload_section_counts_its_settled_pairs_and_says_why_the_rest_are_not():
    # 1.00, 1.02, 1.15 and 1.30 in quiet processes: the 2% pair reads the same speed, the 5 others separate.
    rng = np.random.default_rng(21)
    effects = np.array([0.0, math.log(1.02), math.log(1.15), math.log(1.3)])
    recs = group_records(simulate(rng, 4, 5, t=40, reps=1, effects=effects, process=0.002, generation=0.0)[0])
    fams = report_cells.families(recs)
    (line, _) = report.pairs_note(recs, fams)
    assert line.startswith(
        "Pairs: 6 of 6 settled, each pair judged alone at 95% (5 separated, 1 the same speed within 5%); "
    ), line
    assert "unresolved" not in line
    width = float(re.search(r"median half-width ([\d.]+)% over the 6 judged", line).group(1))
    assert 0 < width < 2.5, "0.2% process noise on 5 generations: the 2% pair's interval lies within 1 +- 5%"
    # Two generations never decide a pair: every pair unresolved, with that reason, and no interval to size.
    short = group_records(simulate(rng, 4, 2, reps=1, effects=effects, process=0.002)[0], workload="cnn")
    (line, _) = report.pairs_note(short, report_cells.families(short))
    assert line == (
        "Pairs: 0 of 6 settled, each pair judged alone at 95% (0 separated, 0 the same speed within 5%); "
        f"6 unresolved ({verdicts.FEW_GENERATIONS}: 6)."
    )
    (total, _) = report.settled_total(report_cells.families(recs + short))
    assert "at 95%: 6 of 12 (50.0%)" in total
    assert report.pairs_note(recs, {}) == [] and report.settled_total({}) == [], "no two adapters: no pairs"


# -- between runs --------------------------------------------------------------------------------


def run_cell(levels: np.ndarray, run_id: str) -> dict:
    """A cell of one run from its processes' log step times (seconds)."""
    return {
        "run_id": run_id,
        "median_s": float(np.mean(np.exp(levels))),
        "process_levels": {k + 1: float(v) for k, v in enumerate(levels)},
    }


def test_compare_never_calls_a_tenfold_regression_the_same_speed():
    rng = np.random.default_rng(9)
    outcomes = []
    for drift in (0.15, 0.5, 1.0):  # rerun drift between processes, up to wild
        for _ in range(200):
            a = run_cell(drift * rng.standard_normal(2), "A")
            b = run_cell(math.log(10) + drift * rng.standard_normal(2), "B")
            found = verdicts.change(a, b)
            outcomes.append(found.outcome)
            if found.outcome == "unresolved":
                assert found.detectable > 1, "it says how large a change it could have seen"
    assert "same speed" not in outcomes and "faster" not in outcomes
    assert "slower" in outcomes and "unresolved" in outcomes


def test_compare_of_identical_runs_with_enough_processes_says_the_same_speed():
    rng = np.random.default_rng(10)
    found = [
        verdicts.change(run_cell(0.015 * rng.standard_normal(8), "A"), run_cell(0.015 * rng.standard_normal(8), "B"))
        for _ in range(500)
    ]
    assert np.mean([f.outcome == "same speed" for f in found]) >= 0.92
    assert max(f.detectable for f in found) < 0.10, "and it could have seen a 10% change in every one"
    # the detectable change is exp((t_0.025 + t_0.2) se) - 1 at Welch's df: 2.228 + 0.879 at 10 df
    assert inference.detectable_change(0.01, 10) == pytest.approx(math.expm1((2.2281 + 0.8791) * 0.01), rel=1e-3)


def test_compare_prints_geometric_means():
    cell = run_cell(np.log([1e-3, 4e-3]), "A")
    assert compare.geometric_mean_s(cell) == pytest.approx(2e-3), "not the arithmetic 2.5 ms"


# -- break-even ------------------------------------------------------------------------------------


def test_break_even_is_the_last_crossing_of_the_cold_window():
    eager = {"cold_times_s": [0.01] * 10, "median_s": 0.01}
    # static's running total against eager's (0.01 n): ahead at 1, behind at 2-3, ahead at 4-5,
    # behind at 6, ahead from 7 on: three crossings
    totals = [0.005, 0.025, 0.035, 0.036, 0.045, 0.065, 0.066, 0.067, 0.068, 0.069]
    static = {"cold_times_s": list(np.diff([0.0, *totals])), "median_s": 0.001}
    assert breakeven.break_even(static, eager) == 7, "not 1, the first crossing"
    behind = {**static, "cold_times_s": [*static["cold_times_s"][:-1], 0.05]}  # behind at the window's end
    gap = sum(behind["cold_times_s"]) - 0.1
    assert breakeven.break_even(behind, eager) == 10 + math.ceil(gap / 0.009)
    assert breakeven.break_even({**static, "median_s": 0.02}, eager) is None, "a slower steady step never pays off"


def test_the_cold_window_is_the_mean_of_every_process():
    rec = {"cold_times_s": [1.0, 0.1, 0.1], "round_cold_times_s": [[1.0, 0.1, 0.1], [3.0, 0.3]], "median_s": 0.1}
    assert breakeven.cold_window(rec) == pytest.approx([2.0, 0.2])
    assert breakeven.cumulative_s(rec, 3) == pytest.approx(2.3)


def test_pairs_not_separated_get_no_break_even():
    rng = np.random.default_rng(13)
    effects = np.array([0.0, math.log(0.5), 0.0, 0.0])
    recs = group_records(simulate(rng, 4, 3, reps=1, effects=effects, process=0.03)[0], cold_times_s=[0.5, 0.01, 0.01])
    base, fast, twin = recs[0], recs[1], recs[3]
    assert breakeven.break_even_text(fast, base).replace(",", "").isdigit()
    assert breakeven.break_even_range(fast, base) is not None
    found = verdicts.pair_verdict(base, twin).outcome
    assert found in ("same speed", "unresolved")
    assert breakeven.break_even_text(twin, base) == found and breakeven.break_even_range(twin, base) is None
    one = group_records(simulate(rng, 4, 1, reps=1, effects=effects)[0], cold_times_s=[0.5, 0.01, 0.01])
    assert breakeven.break_even_text(one[1], one[0]) == "unresolved"


def _fast_pair(seed: int = 13) -> tuple[dict, dict]:
    """A static cell twice as fast in steady state as its eager base, three processes each."""
    rng = np.random.default_rng(seed)
    effects = np.array([0.0, math.log(0.5), 0.0, 0.0])
    recs = group_records(simulate(rng, 4, 3, reps=1, effects=effects, process=0.03)[0], cold_times_s=[0.5])
    return recs[1], recs[0]


def test_the_break_even_range_spans_every_pairing_of_process_cold_windows_and_the_steady_interval():
    static, base = _fast_pair()
    # eager: no compile, two processes (combine writes each process's window with its load flag)
    base = {**base, "round_cold_times_s": [[0.002] * 4, [0.004] * 4], "round_cold_contended": [False, False]}
    quick, slow = [0.2] + [0.001] * 3, [0.6] + [0.001] * 3  # one process compiled three times as long
    static = {**static, "round_cold_times_s": [quick, slow], "round_cold_contended": [False, False]}
    _, low, high = verdicts.relative(base, static)
    expected = [
        breakeven.break_even(
            {**static, "cold_times_s": mine, "round_cold_times_s": [], "median_s": base["median_s"] * ratio},
            {**base, "cold_times_s": theirs, "round_cold_times_s": []},
        )
        for mine in (quick, slow)
        for theirs in base["round_cold_times_s"]
        for ratio in (low, high)
    ]
    assert breakeven.break_even_range(static, base) == (min(expected), max(expected))
    # wider than the mean window alone gives: the processes' compile spread is in the range
    mean_only = [breakeven.break_even({**static, "median_s": base["median_s"] * ratio}, base) for ratio in (low, high)]
    early, late = breakeven.break_even_range(static, base)
    assert early < min(mean_only) and late > max(mean_only)


def test_a_cold_window_under_other_load_is_left_out_of_the_range_and_the_table_says_so():
    from harness.reporting.static_dynamic import payoff

    static, base = _fast_pair()
    base = {**base, "round_cold_times_s": [[0.002] * 4], "round_cold_contended": [False]}
    quiet, loaded = [0.2] + [0.001] * 3, [5.0] + [0.001] * 3
    alone = {**static, "round_cold_times_s": [quiet], "round_cold_contended": [False]}
    mixed = {**static, "round_cold_times_s": [quiet, loaded], "round_cold_contended": [False, True]}
    assert breakeven.process_windows(mixed) == ([quiet], 1, False)
    assert breakeven.break_even_range(mixed, base) == breakeven.break_even_range(alone, base)
    assert breakeven.cold_load_note(mixed, base) == "1 of a1's cold windows left out for other load"
    assert payoff(mixed, base).endswith("(1 of a1's cold windows left out for other load)")
    busy = {**static, "round_cold_times_s": [loaded], "round_cold_contended": [True]}
    assert breakeven.process_windows(busy) == ([loaded], 0, True)  # nothing quiet: kept, and said
    assert breakeven.cold_load_note(busy, base) == "a1's cold window ran under other load"
    assert breakeven.break_even_range(busy, base)[0] > breakeven.break_even_range(alone, base)[1]
    # a record without per-process windows: its own window and flag
    lone = {**static, "round_cold_times_s": [], "cold_times_s": loaded, "cold_contended": True}
    assert breakeven.process_windows(lone) == ([loaded], 0, True)


def test_combining_processes_keeps_each_cold_windows_load_flag():
    runs = [
        {"status": "ok", "round": g, "step_times_s": [1e-3, 1.1e-3], "median_s": 1e-3, "batch_size": 32}
        | {"cold_times_s": [0.1 * g], "cold_s": 0.1 * g, "cold_contended": g == 2}
        for g in (1, 2, 3)
    ]
    rec = cells.combine(runs)
    assert rec["round_cold_times_s"] == [[0.1], [0.2], pytest.approx([0.3])]
    assert rec["round_cold_contended"] == [False, True, False]


def test_a_pair_the_run_cannot_judge_is_unresolved_everywhere_in_the_report():
    """One process per cell: the tables, the overview, the summary and compare say "unresolved"
    (with the reason where there is room), never "same speed" or a fastest, however far apart the
    medians; three rounds of a clear gap separate, and of no gap print the interval."""
    from harness.reporting import overview, summary
    from harness.reporting.workload_tables import _vs_fastest

    rng = np.random.default_rng(21)
    effects = np.array([0.0, math.log(2.0), 0.0, 0.0])
    # a worker's own interval (within its one process), as every real record has
    fields = {"device": "cpu", "device_requested": "cpu", "data": "resident", "ci_low_s": 1e-3, "ci_high_s": 2e-3}
    one = group_records(simulate(rng, 4, 1, reps=1, effects=effects)[0], **fields)
    assert not verdicts.judged(one[0], one[1]) and not verdicts.separated(one[0], one[1])
    assert _vs_fastest(one[1], one[0]).endswith("unresolved (one process per cell)")
    grid = overview.grid(one)
    texts = {adapter: overview.cell_text(cell) for (_, adapter), cell in grid.cells.items()}
    assert "unresolved" in texts["a1"] and "same" not in texts["a1"]
    (sentence,) = summary.winner_sentences(one)
    assert "unresolved at the top" in sentence and "separated from every other adapter:" not in sentence
    between = "\n".join(compare._verdicts(one, one))
    assert "| unresolved (" in between and "same speed (" not in between, "compare's fastest column too"
    three = group_records(simulate(rng, 4, 3, reps=1, effects=effects)[0], **fields)
    assert verdicts.judged(three[0], three[1]) and verdicts.separated(three[0], three[1])
    assert verdicts.pair_verdict(three[0], three[2]).judged
    assert re.fullmatch(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]( same speed| unresolved)?", _vs_fastest(three[2], three[0]))


@pytest.mark.parametrize(("k", "power"), [(4, 0.90), (3, 0.70)])
def test_the_default_protocol_finds_a_ten_percent_difference_and_keeps_aa_at_the_nominal_rate(k, power):
    """The default run's protocol as it runs: 10 adapters in a group, 8 kept turns a generation
    (the fewest any group gets: rnn-caption's whole passes), 3 planned generations and a 4th where
    the budget holds it, its verdicts read once at 95% (harness.running.budget.VERDICT_LEVEL);
    3% noise in a process's level (2% between processes, 5% per block over 8 blocks). A true 10%
    difference: found in 93.5% of groups at 4 generations, 76% at 3 (under the protocol before
    2026-11-27, at Pocock's 97.06% for its looks: 86% and 63%); identical cells at most at the
    nominal rate (3.0% and 2.0% here)."""
    level = policy.VERDICT_LEVEL
    effects = np.zeros(10)
    effects[1] = math.log(1.10)
    blocks = simulate(np.random.default_rng(50 + k), 10, k, t=8, effects=effects, process=0.02)
    found = np.mean(slower(*verdicts_of(blocks, 0, 1, level)))
    assert found >= power, f"found in {found:.2f}"
    low, high = verdicts_of(blocks, 2, 3, level)  # two identical cells of the same groups
    assert np.mean((low > 0) | (high < 0)) <= 1 - level


def test_slow_cells_that_sat_turns_out_keep_the_nominal_rate_and_their_power():
    """Three slow cells of ten take part in 5 of each generation's 8 kept turns, the same turns
    (harness.running.turns.takes_part), their levels over their own blocks, the others' over all
    8; shared drift per turn no longer cancels between a slow cell and a full one. At the default
    protocol's 4 generations, 95%, and the simulation's noise: identical cells are separated at
    most at the nominal rate, slow against slow, slow against full and full against full (4.6%,
    3.2% and 2.4% here; 3.0-4.6% over seeds 77-79), and a true 10% between two slow cells is still
    found in 80% of groups or more (86%, against 94% had they taken every turn)."""
    from harness.running import turns

    kept, taken, part = 0, 0, []
    while kept < turns.MIN_TURNS:
        if turns.takes_part(taken, kept, turns.MIN_TURNS):
            part.append(kept)
            taken += 1
        kept += 1
    assert len(part) == verdicts.MIN_BLOCKS
    level = policy.VERDICT_LEVEL
    effects = np.zeros(10)
    effects[1] = math.log(1.10)
    blocks = simulate(np.random.default_rng(77), 10, 4, t=turns.MIN_TURNS, effects=effects, process=0.02)
    levels = scipy.stats.trim_mean(blocks, cells.TRIM, axis=-1)
    levels[:, :3] = scipy.stats.trim_mean(blocks[:, :3][..., part], cells.TRIM, axis=-1)  # cells 0-2 slow
    for a, b in ((0, 2), (2, 3), (3, 4)):  # identical: slow and slow, slow and full, full and full
        low, high = levels_verdicts(levels, a, b, level)
        assert np.mean((low > 0) | (high < 0)) <= 1 - level, (a, b)
    found = np.mean(slower(*levels_verdicts(levels, 0, 1, level)))
    assert found >= 0.80, f"found in {found:.2f}"

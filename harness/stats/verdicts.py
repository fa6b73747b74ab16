"""Verdicts between cells, from their processes (docs: the record contract of resident workers).

The unit of evidence is a process, never a step: the noise on these machines lives between
processes and over minutes, so two values of one cell are not a distribution. A combined record
(harness.stats.cells.combine_all) carries its **process levels** ``L[c, k]`` (the log step time
of cell c in generation k) and what its group's model says:

- **Within a run**, the cells of a group (they differ only by adapter) ran their generations
  side by side, so ``L[c, k] = mu_c + gamma_k + e_ck`` (the generation's drift ``gamma_k``
  cancels in a pair's per-generation differences ``d_k = L[b, k] - L[a, k]``). A pair's log
  ratio is ``mean_k d_k``; its variance is **moderated** (empirical Bayes, as limma does for the
  same problem): the pair's own ``var_k d_k`` on ``K - 1`` df, combined with a prior fitted to
  every pair of the group (``group_prior``: location ``s0^2`` and df ``d0``, limma's fitFDist),
  ``(d0' s0^2 + (K - 1) s^2) / (d0' + K - 1)`` on ``d0' + K - 1`` df. ``d0'`` is the group's
  ``d0`` capped at ``K - 1`` (the group counts at most as much as the pair's own generations)
  and scaled by the pair's cells' weights (``group_prior``: near 0 for a cell whose pairs
  are all far noisier than the prior expects), so a quiet pair borrows strength and a noisy
  cell is judged on its own spread: df moves smoothly, no switch. "unresolved" (not judged)
  where there is one process per cell, fewer than ``MIN_GENERATIONS``, too few blocks
  (``MIN_BLOCKS``), or a cell lacks a generation.
- **Between groups of one run, and between runs**: nothing pairs the processes, so Welch's t on
  the two sides' process levels (unpaired, unequal variances). Between runs (``change``) the
  same three outcomes, each with the smallest change the comparison could have detected at 80%
  power. It never says "no change" where the interval holds 1 and that smallest change is under
  10%: that is a claim from power after the fact, which an interval within the same-speed band makes
  (or does not) by itself.
- **Three outcomes**: *same speed* (the whole interval within ``SAME_BAND``, [1 / (1 +
  ``SETTLE_MARGIN``), 1 + ``SETTLE_MARGIN``], symmetric in the ratio, whether or
  not it excludes 1: an equivalence test, as Schuirmann's two one-sided tests, at the stricter
  level of the full interval), *separated* (``faster`` / ``slower``: the interval excludes 1 and
  reaches past ``SAME_BAND``) and *unresolved* (anything else, with its reason). A pair
  is ``settled`` when separated or the same speed. Same speed comes first because identical
  code in fresh processes measures about 1% apart often enough, persisting across generations,
  that calibration with twins separated it above the nominal rate (docs/measurement.md); a
  difference under 5% is not claimed.
- **Families** (``family``): "the fastest" and the "vs fastest" marks are claims against every
  rival, so the comparisons of a group are tested together, Holm's step-down over all of its
  ``n (n - 1) / 2`` pairs (the leader is picked from the data, so its ``n - 1`` comparisons
  alone would not hold the family's rate).
- **One look**: a time budget adds generations by time alone, reading no verdict
  (harness.running.budget.VERDICT_LEVEL), so each verdict is read once at its level. The looks
  protocol it replaced added them to unsettled groups and looked again, at Pocock's level per look
  (``pocock_level``; harness.calibrate's ``--looks`` judges that protocol; its records are schema 1,
  harness.records).
- **Pure**: a verdict is a function of its two records and the level alone, so every table,
  picture and sentence of a report that quotes a pair reads the same verdict; the report model
  (harness.reporting.model) keeps the ones it computed so that each is computed once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import scipy.special
import scipy.stats

from harness.records import Record, round_of
from harness.stats.inference import (
    DEFAULT_LEVEL,
    detectable_change,
    holm,
    moderated,
    t_quantile,
    welch,
)
from harness.stats.steps import step_time

#: Fewer time-paired blocks than this per process (in any generation): the pair is not judged.
MIN_BLOCKS = 5
#: Fewer generations than this: the pair is not judged (two processes a cell give the pair's own
#: spread one degree of freedom; whatever the group lends, two generations never decide a pair).
MIN_GENERATIONS = 3
#: "Same speed" when the whole interval lies within [1 / (1 + this), 1 + this]: symmetric in the
#: ratio, so naming a pair the other way round swaps faster and slower and keeps the rest.
SETTLE_MARGIN = 0.05

FASTER, SLOWER, SAME, UNRESOLVED = "faster", "slower", "same speed", "unresolved"
#: The same-speed band as a report prints it.
SAME_BAND = f"[{1 / (1 + SETTLE_MARGIN):.3f}, {1 + SETTLE_MARGIN:.2f}]"

#: Reasons a pair is unresolved: the run could not judge it at all ...
ONE_PROCESS = "one process per cell"
FEW_BLOCKS = f"fewer than {MIN_BLOCKS} blocks in a process"
FEW_GENERATIONS = f"fewer than {MIN_GENERATIONS} generations"
MISSING_GENERATION = "a cell lacks a generation of its group"
#: ... or judged it, and its interval neither excludes 1 nor lies within SAME_BAND.
WIDE = "interval spans 1 and reaches past the same-speed band"
#: ... or the pair alone separates, but not once the group's comparisons are counted (``family``).
FAMILY = "not separated once the group's comparisons are counted (Holm)"
#: ... or it is faster than the leader by its processes' levels, slower by its mean step.
RANKS = "faster than the leader by its processes' levels"


@dataclass(frozen=True)
class PairVerdict:
    """time(b) / time(a): point and interval; ``outcome`` says what b is against a
    (``faster``, ``slower``, ``same speed``, or ``unresolved`` with the ``reason``); ``p``: the
    two-sided p-value of "no difference" (1 where the pair is not judged), for families."""

    point: float
    low: float
    high: float
    outcome: str
    reason: str = ""
    df: float | None = None
    p: float = 1.0

    @property
    def separated(self) -> bool:
        return self.outcome in (FASTER, SLOWER)

    @property
    def judged(self) -> bool:
        """Whether the run could judge the pair at all (an interval was computed)."""
        return math.isfinite(self.high)

    @property
    def settled(self) -> bool:
        return self.outcome in (FASTER, SLOWER, SAME)


@dataclass(frozen=True)
class RunChange:
    """One cell in two runs: time(B) / time(A) with its interval, the verdict (``faster``,
    ``slower``, ``same speed``, ``unresolved`` with its ``reason``: ``outcome_of``) and the
    smallest change the comparison could have detected with 80% power (a fraction: 0.1 is 10%;
    None where it cannot say)."""

    point: float
    low: float
    high: float
    outcome: str
    detectable: float | None
    reason: str = ""


def outcome_of(low: float, high: float, reason: str = WIDE) -> tuple[str, str]:
    """b against a from the interval of time(b) / time(a): (outcome, reason; empty when settled).
    ``same speed`` wherever the whole interval lies within [1 / (1 + SETTLE_MARGIN), 1 +
    SETTLE_MARGIN], even if it excludes 1 (module docstring); else faster or slower where it
    excludes 1. Symmetric: the interval of time(a) / time(b), [1 / high, 1 / low], gets the mirror word."""
    if 1 / (1 + SETTLE_MARGIN) <= low and high <= 1 + SETTLE_MARGIN:
        return SAME, ""
    if high < 1:
        return FASTER, ""
    if low > 1:
        return SLOWER, ""
    return UNRESOLVED, reason


# -- on records ---------------------------------------------------------------------------------


def levels_of(rec: Record) -> dict[int, float]:
    """Generation -> process level (log step time) of a record: what ``combine`` stored, or for
    a lone round's record the log of its step time."""
    stored = rec.get("process_levels")
    if stored:
        return {int(k): float(v) for k, v in stored.items()}
    if not rec.get("step_times_s"):
        return {}
    batches = rec.get("step_batches") if (rec.get("pass_steps") or 1) > 1 else None
    return {round_of(rec): math.log(step_time(rec["step_times_s"], batches))}


def level_of(*recs: Record) -> float:
    """The confidence level the records' verdicts use (the strictest of theirs)."""
    return max((float(r["verdict_level"]) for r in recs if r.get("verdict_level")), default=DEFAULT_LEVEL)


def _machine(rec: Record) -> tuple:
    fp = rec.get("fingerprint")
    return rec.get("run_id"), rec.get("machine"), json.dumps(fp, sort_keys=True) if fp else None


def same_group(a: Record, b: Record) -> bool:
    """Whether two cells ran side by side, generation by generation (one run, one machine, one
    group): then their process levels pair by generation."""
    if _machine(a) != _machine(b):
        return False
    return a.get("group") == b.get("group") if a.get("group") or b.get("group") else True


def _not_judged(point: float, reason: str) -> PairVerdict:
    return PairVerdict(point, 0.0, math.inf, UNRESOLVED, reason)


def _judged(log_point: float, se: float, df: float, level: float, reason: str = WIDE) -> PairVerdict:
    t = float(t_quantile(level, df))
    low, high = math.exp(log_point - t * se), math.exp(log_point + t * se)
    word, why = outcome_of(low, high, reason)
    p = float(2 * scipy.stats.t.sf(abs(log_point) / se, df)) if se > 0 else float(log_point == 0)
    return PairVerdict(math.exp(log_point), low, high, word, why, df, p)


def pair_verdict(a: Record, b: Record, level: float | None = None) -> PairVerdict:
    """time(b) / time(a) and the verdict on b against a (module docstring): paired by
    generation within a group, Welch's t between groups and between runs."""
    level = level_of(a, b) if level is None else level
    la, lb = levels_of(a), levels_of(b)
    if not la or not lb:
        return _not_judged(b["median_s"] / a["median_s"], ONE_PROCESS)
    if len(la) < 2 or len(lb) < 2:  # a ratio of medians, as a one-process cell prints its step
        return _not_judged(b["median_s"] / a["median_s"], ONE_PROCESS)
    geo = math.exp(np.mean(list(lb.values())) - np.mean(list(la.values())))
    if not same_group(a, b):
        diff, se, df, _ = welch(np.array(list(la.values())), np.array(list(lb.values())), level)
        return _judged(diff, se, df, level, "unpaired: different groups")
    blocks = cast(list[int], [r.get("blocks") for r in (a, b) if r.get("blocks") is not None])
    if blocks and min(blocks) < MIN_BLOCKS:
        return _not_judged(geo, FEW_BLOCKS)
    gens = a.get("group_generations")
    if gens is not None and not (set(gens) <= set(la) and set(gens) <= set(lb)):
        return _not_judged(geo, MISSING_GENERATION)
    common = sorted(set(la) & set(lb))
    if gens is None and (set(la) != set(lb)):
        return _not_judged(geo, MISSING_GENERATION)
    if len(common) < 2:
        return _not_judged(geo, ONE_PROCESS)
    diffs = np.array([lb[k] - la[k] for k in common])
    if len(common) < MIN_GENERATIONS:
        return _not_judged(math.exp(diffs.mean()), FEW_GENERATIONS)
    prior_var, prior_df = a.get("group_prior_var"), a.get("group_prior_df")
    if prior_var is None or prior_df is None or b.get("group_prior_var") != prior_var:
        prior_var, prior_df = 0.0, 0.0  # the pair alone (records not combined together): its own spread
    weight = min(float(a.get("prior_weight", 1.0)), float(b.get("prior_weight", 1.0)))
    point, se, df = (float(v) for v in moderated(diffs, prior_var, prior_df, weight))
    return _judged(point, se, df, level)


def relative(a: Record, b: Record) -> tuple[float, float, float]:
    """time(b) / time(a) and its interval (``pair_verdict``; not judged: ``(point, 0, inf)``)."""
    v = pair_verdict(a, b)
    return v.point, v.low, v.high


def outcome(a: Record, b: Record) -> str:
    """``pair_verdict``'s outcome for b against a. Records with no processes to read (no steps,
    no levels) fall back to non-overlapping intervals of each: faster or slower, else unresolved."""
    if not (a.get("process_levels") or a.get("step_times_s")) or not (b.get("process_levels") or b.get("step_times_s")):
        if "ci_low_s" in a and "ci_low_s" in b and b["ci_high_s"] < a["ci_low_s"]:
            return FASTER
        if "ci_low_s" in a and "ci_low_s" in b and a["ci_high_s"] < b["ci_low_s"]:
            return SLOWER
        return UNRESOLVED
    return pair_verdict(a, b).outcome


def separated(a: Record, b: Record) -> bool:
    """True when two cells differ (``outcome``: faster or slower)."""
    return outcome(a, b) in (FASTER, SLOWER)


def judged(a: Record, b: Record) -> bool:
    """False where the run cannot judge the pair at all (one process per cell, too few blocks)."""
    return pair_verdict(a, b).judged


def settled(a: Record, b: Record, level: float | None = None) -> bool:
    """Whether a pair's verdict needs no more generations: separated, or the same speed (its
    interval within SAME_BAND: it cannot hide a meaningful difference)."""
    return pair_verdict(a, b, level).settled


@dataclass(frozen=True)
class Family:
    """A group's cells judged together (``family``): the ``leader`` (the fastest point), each
    rival with its verdict against the leader under Holm over the group's pairs (fastest
    first), how many comparisons the family counted, and whether the leader is *the fastest*:
    separated from every rival, each at least SETTLE_MARGIN behind (a report claims no lead
    smaller than the difference it calls the same speed)."""

    leader: Record
    rivals: list[tuple[Record, PairVerdict]]
    comparisons: int
    #: False where the leader's timing cannot be trusted (its physics check failed): no fastest then.
    claimable: bool = True

    @property
    def fastest(self) -> bool:
        ahead = all(v.outcome == SLOWER for _, v in self.rivals) and self.lead >= 1 + SETTLE_MARGIN
        return bool(self.rivals) and ahead and self.claimable

    @property
    def lead(self) -> float:
        """How far the nearest rival's ratio lies behind the leader (inf without rivals)."""
        return min((v.point for _, v in self.rivals), default=math.inf)

    @property
    def members(self) -> list[Record]:
        """The family's cells, the leader first, then its rivals (fastest first)."""
        return [self.leader, *(r for r, _ in self.rivals)]


def family_pair(a: Record, b: Record, level: float) -> PairVerdict:
    """``pair_verdict``, or for records with no processes to read ``outcome``'s fallback on their
    own intervals (certain where they do not overlap: p = 0)."""
    if levels_of(a) and levels_of(b):
        return pair_verdict(a, b, level)
    word = outcome(a, b)
    ratio = b["median_s"] / a["median_s"]
    if word in (FASTER, SLOWER):  # no interval of the ratio to print: (0, inf)
        return PairVerdict(ratio, 0.0, math.inf, word, "the cells' own intervals do not overlap", None, 0.0)
    return _not_judged(ratio, ONE_PROCESS)


def family(cells: list[Record], level: float | None = None) -> Family:
    """The group's verdicts against its leader (the smallest ``median_s``), family-wise (module
    docstring): Holm over all ``n (n - 1) / 2`` pairs; a rival is the same speed where its own
    interval lies within SAME_BAND, else slower where its pair with the leader is
    rejected, else unresolved (with FAMILY as the reason where the pair alone would separate)."""
    order = sorted(cells, key=lambda r: r["median_s"])
    lead = order[0]
    level = level_of(*cells) if level is None else level
    pairs = [(n, m) for n in range(len(order)) for m in range(n + 1, len(order))]
    found = [family_pair(order[n], order[m], level) for n, m in pairs]
    rejected = dict(zip(pairs, holm([v.p for v in found], level), strict=True))
    rivals = []
    for (n, m), v in zip(pairs, found, strict=True):
        if n:
            continue
        if v.outcome == FASTER:  # ranked by mean step, faster by its processes' levels: no fastest here
            v = PairVerdict(v.point, v.low, v.high, UNRESOLVED, RANKS, v.df, v.p)
        elif v.separated and not rejected[(n, m)]:
            v = PairVerdict(v.point, v.low, v.high, UNRESOLVED, FAMILY, v.df, v.p)
        rivals.append((order[m], v))
    return Family(lead, rivals, len(pairs))


def change(a: Record, b: Record, level: float | None = None) -> RunChange:
    """One cell in run A (``a``) and in run B (``b``): Welch's t on their process levels, worded by
    ``outcome_of`` as every verdict is (same speed within SAME_BAND first)."""
    level = level_of(a, b) if level is None else level
    la, lb = list(levels_of(a).values()), list(levels_of(b).values())
    if len(la) < 2 or len(lb) < 2:
        point = math.exp(np.mean(lb) - np.mean(la)) if la and lb else b["median_s"] / a["median_s"]
        return RunChange(point, 0.0, math.inf, UNRESOLVED, None, ONE_PROCESS)
    diff, se, df, t = welch(np.array(la), np.array(lb), level)
    point, low, high = math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se)
    word, reason = outcome_of(low, high)
    return RunChange(point, low, high, word, detectable_change(se, df, level), reason)

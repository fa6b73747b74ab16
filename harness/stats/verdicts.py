"""Verdicts between cells, from their processes (docs: the record contract of resident workers).

The unit of evidence is a process, never a step: the noise on these machines lives between
processes and over minutes, so two values of one cell are not a distribution. A combined record
(harness.stats.cells.combine_all) carries its **process levels** ``L[c, k]`` (the log step time
of cell c in generation k) and what its group's model says:

- **Within a run**, the cells of a group (they differ only by adapter) ran their generations
  side by side, so ``L[c, k] = mu_c + gamma_k + e_ck`` (a two-way additive model: the
  generation's drift ``gamma_k`` cancels). Residual variance ``s^2``: the group's typical cell's
  (the median of the cells' own residual variances, ``residual_variance``), with
  ``df = (C - 1)(K - 1)``. A pair's log ratio is ``mean_k(L[b, k] - L[a, k])``, its variance
  ``max(2 s^2 / K, var_k(L[b, k] - L[a, k]) / K)`` (the pair's own spread never under-counted),
  and its interval uses the t quantile with the pooled df, or ``K - 1`` where the pair's own
  spread is the larger (``pair_df``). "not judged" where there is one
  process per cell, too few blocks (``MIN_BLOCKS``), ``df < 2``, or a cell lacks a generation.
- **Between groups of one run, and between runs**: nothing pairs the processes, so Welch's t on
  the two sides' process levels (unpaired, unequal variances). Between runs (``change``) the
  verdict is "inconclusive" where the interval is too wide to have detected a meaningful change
  (``MEANINGFUL_CHANGE``), with the smallest change it could have detected at 80% power.
- **Sequential looks** (a time budget adds generations to unsettled groups and looks again): the
  level per look comes from Pocock's constants (``pocock_level``), and a pair is ``settled``
  when separated, or tied within ``SETTLE_MARGIN``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from harness.records import Record
from harness.stats.steps import step_time

#: Confidence level of verdicts where the records do not say (``verdict_level``).
DEFAULT_LEVEL = 0.95
#: Fewer time-paired blocks than this per process (in any generation): the pair is not judged.
MIN_BLOCKS = 5
#: A tie is settled when its whole interval lies within 1 +- this (it cannot hide a larger difference).
SETTLE_MARGIN = 0.05
#: Power at which ``change`` reports the smallest detectable change.
POWER = 0.8
#: Between runs, "no change" needs the interval to have been able to see a change this large.
MEANINGFUL_CHANGE = 0.10
#: Pocock's critical values (standard normal) for 1..10 equally spaced looks at two-sided 5%.
POCOCK_Z = (1.960, 2.178, 2.289, 2.361, 2.413, 2.453, 2.485, 2.512, 2.535, 2.555)
MAX_LOOKS = len(POCOCK_Z)

FASTER, SLOWER, TIE, NOT_JUDGED = "faster", "slower", "tie", "not judged"
NO_CHANGE, INCONCLUSIVE = "no change", "inconclusive"

#: Reasons a pair is not judged.
ONE_PROCESS = "one process per cell"
FEW_BLOCKS = f"fewer than {MIN_BLOCKS} blocks in a process"
FEW_DF = "too few cells and generations to estimate the noise (df < 2)"
MISSING_GENERATION = "a cell lacks a generation of its group"


@dataclass(frozen=True)
class PairVerdict:
    """time(b) / time(a): point and interval; ``outcome`` says what b is against a
    (``faster``, ``slower``, ``tie``, or ``not judged`` with the ``reason``)."""

    point: float
    low: float
    high: float
    outcome: str
    reason: str = ""
    df: float | None = None

    @property
    def separated(self) -> bool:
        return self.outcome in (FASTER, SLOWER)


@dataclass(frozen=True)
class RunChange:
    """One cell in two runs: time(B) / time(A) with its interval, the verdict (``faster``,
    ``slower``, ``no change``, ``inconclusive``) and the smallest change the comparison could
    have detected with 80% power (a fraction: 0.1 is 10%; None where it cannot say)."""

    point: float
    low: float
    high: float
    outcome: str
    detectable: float | None
    reason: str = ""


# -- the model, on arrays (vectorised over leading axes for simulations) ------------------------


def t_quantile(level: float, df: float | np.ndarray) -> float | np.ndarray:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom."""
    return scipy.stats.t.ppf(0.5 + level / 2, df)


def residual_variance(levels: np.ndarray) -> tuple[np.ndarray, int]:
    """Residual variance of the two-way additive model over ``levels[..., c, k]`` (cells x
    generations, complete) and its degrees of freedom ``(C - 1)(K - 1)``.

    The variance is the typical cell's, not the mean over cells: each cell's own residual
    variance (its squared residuals over its ``(K - 1)(C - 1) / C`` share of the df), their median,
    scaled to the mean of a chi-square on ``K - 1`` df. Cells differ in noise (an eager framework's
    processes spread ten times a compiled one's on the 2-core VM), and the mean would give every
    pair the noisiest cell's spread; a pair noisier than the typical cell is judged on its own
    spread (``pair_interval``), so none is under-counted."""
    levels = np.asarray(levels, dtype=np.float64)
    c, k = levels.shape[-2:]
    df = (c - 1) * (k - 1)
    resid = (
        levels
        - levels.mean(axis=-1, keepdims=True)
        - levels.mean(axis=-2, keepdims=True)
        + levels.mean(axis=(-2, -1), keepdims=True)
    )
    if not df:
        return np.full(levels.shape[:-2], np.nan), df
    per_cell = (resid**2).sum(axis=-1) / ((k - 1) * (c - 1) / c)
    typical = np.median(per_cell, axis=-1) / (scipy.stats.chi2.median(k - 1) / (k - 1))
    return typical, df


def pair_interval(
    diffs: np.ndarray, s2: np.ndarray | float, df: int, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log ratio and its interval for a pair of cells from their per-generation differences
    ``diffs[..., k] = L[b, k] - L[a, k]`` and the group's residual variance ``s2`` on ``df``
    (``pair_df`` says which degrees of freedom the quantile uses)."""
    diffs = np.asarray(diffs, dtype=np.float64)
    k = diffs.shape[-1]
    point = diffs.mean(axis=-1)
    own, pooled = diffs.var(axis=-1, ddof=1) / k, 2 * np.asarray(s2) / k
    se = np.sqrt(np.maximum(pooled, own))
    half = t_quantile(level, pair_df(own, pooled, df, k)) * se
    return point, point - half, point + half


def pair_df(own: np.ndarray | float, pooled: np.ndarray | float, df: int, k: int) -> np.ndarray:
    """Degrees of freedom of a pair's interval: the group's pooled ``df`` where the pooled
    variance ``2 s^2 / K`` is the larger, else ``K - 1``, those of the pair's own spread that
    replaced it (a cell noisier than its group would otherwise get too short a quantile: in
    simulation, coverage of one 3x noisier cell falls to 86-91% on the pooled df)."""
    return np.where(np.asarray(own) > np.asarray(pooled), k - 1, df)


def welch(log_a: np.ndarray, log_b: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[float, float, float, float]:
    """Welch's t on two sets of log process levels: (log ratio of geometric means, its standard
    error, Welch-Satterthwaite df, t quantile at ``level``). Needs two values a side."""
    log_a, log_b = np.asarray(log_a, dtype=np.float64), np.asarray(log_b, dtype=np.float64)
    va, vb = log_a.var(ddof=1) / len(log_a), log_b.var(ddof=1) / len(log_b)
    diff, se = float(log_b.mean() - log_a.mean()), float(np.sqrt(va + vb))
    if se == 0:
        df = float(len(log_a) + len(log_b) - 2)
    else:
        df = float((va + vb) ** 2 / (va**2 / (len(log_a) - 1) + vb**2 / (len(log_b) - 1)))
    return diff, se, df, float(t_quantile(level, df))


def detectable_change(se: float, df: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> float:
    """The smallest slow-down (a fraction) a two-sided test at ``level`` detects with ``power``
    given the standard error ``se`` of a log ratio: ``exp((t_{alpha/2} + t_{1-power}) se) - 1``."""
    return float(math.expm1((t_quantile(level, df) + scipy.stats.t.ppf(power, df)) * se))


def outcome_of(low: float, high: float) -> str:
    """b against a from the interval of time(b) / time(a)."""
    return FASTER if high < 1 else SLOWER if low > 1 else TIE


def pocock_level(looks: int) -> float:
    """Confidence level of each look when a verdict is looked at ``looks`` times (generations
    added while unsettled) at an overall two-sided 5%: Pocock's nominal per-look alpha (0.05,
    0.0294, 0.0221, 0.0182, 0.0158 for 1..5 looks)."""
    if not 1 <= looks <= MAX_LOOKS:
        raise ValueError(f"looks must be 1..{MAX_LOOKS}, not {looks}")
    return 1 - 2 * float(scipy.stats.norm.sf(POCOCK_Z[looks - 1]))


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
    return {int(rec.get("round") or 1): math.log(step_time(rec["step_times_s"], batches))}


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
    return PairVerdict(point, 0.0, math.inf, NOT_JUDGED, reason)


def pair_verdict(a: Record, b: Record, level: float | None = None) -> PairVerdict:
    """time(b) / time(a) and the verdict on b against a (module docstring): paired by
    generation within a group, Welch's t between groups and between runs."""
    level = level_of(a, b) if level is None else level
    la, lb = levels_of(a), levels_of(b)
    if not la or not lb:
        return _not_judged(b["median_s"] / a["median_s"], ONE_PROCESS)
    geo = math.exp(np.mean(list(lb.values())) - np.mean(list(la.values())))
    if len(la) < 2 or len(lb) < 2:
        return _not_judged(geo, ONE_PROCESS)
    if not same_group(a, b):
        diff, se, df, t = welch(np.array(list(la.values())), np.array(list(lb.values())), level)
        low, high = math.exp(diff - t * se), math.exp(diff + t * se)
        return PairVerdict(math.exp(diff), low, high, outcome_of(low, high), "unpaired: different groups", df)
    blocks = [r.get("blocks") for r in (a, b) if r.get("blocks") is not None]
    if blocks and min(blocks) < MIN_BLOCKS:
        return _not_judged(geo, FEW_BLOCKS)
    gens = a.get("group_generations")
    if gens is not None and not (set(gens) <= set(la) and set(gens) <= set(lb)):
        return _not_judged(geo, MISSING_GENERATION)
    common = sorted(set(la) & set(lb))
    if gens is None and (set(la) != set(lb)):
        return _not_judged(geo, MISSING_GENERATION)
    diffs = np.array([lb[k] - la[k] for k in common])
    if a.get("group_df") is not None and a.get("group_df") == b.get("group_df"):
        s2, df = float(a["group_resid_var"]), int(a["group_df"])
    else:  # the pair alone (records not combined together): a group of two cells
        s2, df = float(diffs.var(ddof=1) / 2) if len(diffs) > 1 else math.nan, len(diffs) - 1
    if len(common) < 2:
        return _not_judged(geo, ONE_PROCESS)
    if df < 2:
        return _not_judged(math.exp(diffs.mean()), FEW_DF)
    point, low, high = (float(math.exp(v)) for v in pair_interval(diffs, s2, df, level))
    used = float(pair_df(diffs.var(ddof=1) / len(diffs), 2 * s2 / len(diffs), df, len(diffs)))
    return PairVerdict(point, low, high, outcome_of(low, high), "", used)


def relative(a: Record, b: Record) -> tuple[float, float, float]:
    """time(b) / time(a) and its interval (``pair_verdict``; not judged: ``(point, 0, inf)``)."""
    v = pair_verdict(a, b)
    return v.point, v.low, v.high


def outcome(a: Record, b: Record) -> str:
    """``pair_verdict``'s outcome for b against a. Records with no processes to read (no steps,
    no levels) fall back to non-overlapping intervals of each: faster or slower, else a tie."""
    if not (a.get("process_levels") or a.get("step_times_s")) or not (b.get("process_levels") or b.get("step_times_s")):
        if "ci_low_s" in a and "ci_low_s" in b and b["ci_high_s"] < a["ci_low_s"]:
            return FASTER
        if "ci_low_s" in a and "ci_low_s" in b and a["ci_high_s"] < b["ci_low_s"]:
            return SLOWER
        return TIE
    return pair_verdict(a, b).outcome


def separated(a: Record, b: Record) -> bool:
    """True when two cells differ (``outcome``: faster or slower)."""
    return outcome(a, b) in (FASTER, SLOWER)


def judged(a: Record, b: Record) -> bool:
    """False where the run cannot judge the pair (one process per cell, too few blocks): not
    separated is then no tie."""
    return outcome(a, b) != NOT_JUDGED


def settled(a: Record, b: Record, level: float | None = None) -> bool:
    """Whether a pair's verdict needs no more generations: separated, or a tie whose interval
    lies within 1 +- SETTLE_MARGIN (it cannot hide a meaningful difference)."""
    v = pair_verdict(a, b, level)
    return v.separated or (v.outcome == TIE and 1 - SETTLE_MARGIN <= v.low and v.high <= 1 + SETTLE_MARGIN)


def change(a: Record, b: Record, level: float | None = None) -> RunChange:
    """One cell in run A (``a``) and in run B (``b``): Welch's t on their process levels.
    ``inconclusive`` where the interval includes 1 but the comparison could not have detected
    a change of MEANINGFUL_CHANGE (or of the size it reports, if larger) with 80% power."""
    level = level_of(a, b) if level is None else level
    la, lb = list(levels_of(a).values()), list(levels_of(b).values())
    if len(la) < 2 or len(lb) < 2:
        point = math.exp(np.mean(lb) - np.mean(la)) if la and lb else b["median_s"] / a["median_s"]
        return RunChange(point, 0.0, math.inf, INCONCLUSIVE, None, ONE_PROCESS)
    diff, se, df, t = welch(np.array(la), np.array(lb), level)
    point, low, high = math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se)
    detectable = detectable_change(se, df, level)
    word = outcome_of(low, high)
    if word == TIE:
        word = INCONCLUSIVE if detectable > max(MEANINGFUL_CHANGE, abs(point - 1)) else NO_CHANGE
    return RunChange(point, low, high, word, detectable)


def cell_interval(levels: list[float], center: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """A cell's interval from its processes' levels (K >= 2): ``center`` times
    ``exp(+- t_{K-1} sd / sqrt(K))``."""
    k = len(levels)
    half = float(t_quantile(level, k - 1)) * float(np.std(levels, ddof=1)) / math.sqrt(k)
    return center * math.exp(-half), center * math.exp(half)

"""The statistics under the verdicts (harness.stats.verdicts), on numbers and arrays (vectorised
over leading axes, for simulations): Student's t quantiles, limma's moderated variances (a prior
fitted to a group's pairs, empirical Bayes), Holm's step-down, Welch's t, the smallest detectable
change, Pocock's per-look levels, a cell's interval from its processes, Wilson's interval of a
proportion. Nothing here reads a record."""

from __future__ import annotations

import math

import numpy as np
import scipy.special
import scipy.stats

#: Confidence level of verdicts where the records do not say (``verdict_level``).
DEFAULT_LEVEL = 0.95
#: Power at which a between-runs change reports the smallest detectable change.
POWER = 0.8
#: Pocock's critical values (standard normal) for 1..10 equally spaced looks at two-sided 5%.
POCOCK_Z = (1.960, 2.178, 2.289, 2.361, 2.413, 2.453, 2.485, 2.512, 2.535, 2.555)
MAX_LOOKS = len(POCOCK_Z)


def t_quantile(level: float, df: float | np.ndarray) -> float | np.ndarray:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom."""
    return scipy.stats.t.ppf(0.5 + level / 2, df)


def _trigamma_inverse(x: np.ndarray) -> np.ndarray:
    """y with trigamma(y) = x (x > 0), by Newton's method from limma's starting point."""
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = scipy.special.polygamma(1, y)
        step = tri * (1 - tri / x) / scipy.special.polygamma(2, y)
        y = y + step
        if np.all(-step / y < 1e-8):
            break
    return y


def fit_prior(variances: np.ndarray, df: float) -> tuple[np.ndarray, np.ndarray]:
    """limma's fitFDist over the last axis: sample variances on ``df`` degrees of freedom each,
    read as scaled chi-squares of true variances drawn from a scaled inverse chi-square: its
    location ``s0^2`` and degrees of freedom ``d0`` (inf where the variances spread no more than
    sampling alone would: one common variance; 0 with fewer than two variances: no prior)."""
    variances = np.asarray(variances, dtype=np.float64)
    n = variances.shape[-1]
    if n < 2:
        return variances[..., 0] if n else np.full(variances.shape[:-1], np.nan), np.zeros(variances.shape[:-1])
    # limma's floor: one variance of 0 (identical levels) must not switch the prior off for the group
    floor = np.maximum(1e-5 * np.median(variances, axis=-1, keepdims=True), 1e-300)
    e = np.log(np.maximum(variances, floor)) - scipy.special.digamma(df / 2) + math.log(df / 2)
    emean = e.mean(axis=-1)
    evar = e.var(axis=-1, ddof=1) - scipy.special.polygamma(1, df / 2)
    d0 = np.where(evar > 0, 2 * _trigamma_inverse(np.where(evar > 0, evar, 1.0)), np.inf)
    finite = np.where(np.isfinite(d0), d0, 1.0)
    s0 = np.where(
        np.isfinite(d0), np.exp(emean + scipy.special.digamma(finite / 2) - np.log(finite / 2)), np.exp(emean)
    )
    return s0, d0


def group_prior(levels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prior a group's pairs are moderated with, from ``levels[..., c, k]`` (cells x
    generations, complete): ``(s0^2, d0, weights[..., c])``. ``s0^2`` and ``d0`` are
    ``fit_prior`` over the variances of every pair's per-generation differences (``K - 1`` df
    each). A cell's weight is how plausible its pairs' spread is under that prior: twice the upper
    tail of F(K - 1, d0) at the median over its pairs of ``var / s0^2``, capped at 1 and squared
    (squared: in simulation a 3x noisier cell's pairs keep 93-94% coverage at 95% rather than
    92-93%), so a cell whose every pair is far noisier than the group's (an eager framework among
    compiled ones) borrows nothing and is judged on its own spread."""
    levels = np.asarray(levels, dtype=np.float64)
    c, k = levels.shape[-2:]
    ia, ib = np.triu_indices(c, 1)
    own = (levels[..., ib, :] - levels[..., ia, :]).var(axis=-1, ddof=1)
    s0, d0 = fit_prior(own, k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # s0 = 0: every pair exact, nothing to weigh
        ratio = np.where(s0[..., None] > 0, own / s0[..., None], 1.0)
    score = np.stack([np.median(ratio[..., (ia == i) | (ib == i)], axis=-1) for i in range(c)], axis=-1)
    dfd = np.where(np.isfinite(d0), np.maximum(d0, 1e-9), 1e9)[..., None]
    weights = np.minimum(1.0, 2 * scipy.stats.f.sf(score, k - 1, dfd)) ** 2
    return s0, d0, weights


def moderated(
    diffs: np.ndarray, prior_var: np.ndarray | float, prior_df: np.ndarray | float, weight: np.ndarray | float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A pair's log ratio, its standard error and degrees of freedom from its per-generation
    differences ``diffs[..., k]`` and the group's prior (``group_prior``): the prior's df capped
    at the pair's own ``K - 1`` and scaled by ``weight`` (the smaller of its cells' weights)."""
    diffs = np.asarray(diffs, dtype=np.float64)
    k = diffs.shape[-1]
    own, d = diffs.var(axis=-1, ddof=1), k - 1
    d0 = np.minimum(np.nan_to_num(np.asarray(prior_df, dtype=np.float64), nan=0.0), d) * np.asarray(weight)
    var = (d0 * np.nan_to_num(np.asarray(prior_var, dtype=np.float64)) + d * own) / (d0 + d)
    return diffs.mean(axis=-1), np.sqrt(var / k), d0 + d


def pair_interval(
    diffs: np.ndarray,
    prior_var: np.ndarray | float,
    prior_df: np.ndarray | float,
    level: float = DEFAULT_LEVEL,
    weight: np.ndarray | float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log ratio and its interval for a pair of cells (``moderated``)."""
    point, se, df = moderated(diffs, prior_var, prior_df, weight)
    half = t_quantile(level, df) * se
    return point, point - half, point + half


def holm(pvalues: list[float], level: float = DEFAULT_LEVEL) -> list[bool]:
    """Holm's step-down at family-wise ``1 - level``: which of the hypotheses are rejected."""
    alpha, m = 1 - level, len(pvalues)
    rejected = [False] * m
    for i, j in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        if pvalues[j] > alpha / (m - i):
            break
        rejected[j] = True
    return rejected


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


def pocock_level(looks: int) -> float:
    """Confidence level of each look when a verdict is looked at ``looks`` times (generations
    added while unsettled) at an overall two-sided 5%: Pocock's nominal per-look alpha (0.05,
    0.0294, 0.0221, 0.0182, 0.0158 for 1..5 looks)."""
    if not 1 <= looks <= MAX_LOOKS:
        raise ValueError(f"looks must be 1..{MAX_LOOKS}, not {looks}")
    return 1 - 2 * float(scipy.stats.norm.sf(POCOCK_Z[looks - 1]))


def cell_interval(levels: list[float], center: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """A cell's interval from its processes' levels (K >= 2): ``center`` times
    ``exp(+- t_{K-1} sd / sqrt(K))``."""
    k = len(levels)
    half = float(t_quantile(level, k - 1)) * float(np.std(levels, ddof=1)) / math.sqrt(k)
    return center * math.exp(-half), center * math.exp(half)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)

"""Summary statistics of one process's raw per-step times (seconds): step time, quartiles, and the
bootstrap interval of its median (the noise within that one process)."""

from __future__ import annotations

import numpy as np

from harness.records import Record

#: A cell whose IQR exceeds this fraction of its median is flagged as noisy in the report.
NOISY_IQR_RATIO = 0.25


BOOTSTRAP_SAMPLES = 2000
#: Most resampled values held at once (8 MB of float64), whatever the number of steps.
BOOTSTRAP_CHUNK = 1_000_000


def bootstrap_medians(times: np.ndarray | list[float], seed: int = 0) -> np.ndarray:
    """BOOTSTRAP_SAMPLES medians of resamples of ``times`` (fixed seed: reproducible), drawn in
    chunks so memory stays bounded for long windows."""
    rng = np.random.default_rng(seed)
    t = np.asarray(times, dtype=np.float64)
    per_chunk = max(1, BOOTSTRAP_CHUNK // len(t))
    return np.concatenate(
        [
            np.median(rng.choice(t, size=(min(per_chunk, BOOTSTRAP_SAMPLES - done), len(t))), axis=1)
            for done in range(0, BOOTSTRAP_SAMPLES, per_chunk)
        ]
    )


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap samples."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def median_ci(times: np.ndarray, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median."""
    return percentile_interval(bootstrap_medians(times, seed), level)


def summarize(
    step_times_s: list[float], batch_size: int, ci: bool = True, batches: list[int] | None = None
) -> dict[str, float]:
    """Step time with its 95% bootstrap CI (unless ``ci`` is False), quartiles, IQR, mean and
    samples/s of step times. The step time (``median_s``) is their median; with ``batches``
    (the batch each step ran, for steps that differ in size), ``pass_mean`` instead."""
    if not step_times_s:
        raise ValueError("no step times to summarize")
    t = np.asarray(step_times_s, dtype=np.float64)
    q1, median, q3 = (float(v) for v in np.percentile(t, [25, 50, 75]))
    if batches is not None:
        median = pass_mean(step_times_s, batches)
    interval = {}
    if ci:
        boots = bootstrap_medians(t) if batches is None else pass_bootstrap(step_times_s, batches)
        interval = dict(zip(("ci_low_s", "ci_high_s"), percentile_interval(boots), strict=True))
    return {
        **interval,
        "median_s": median,
        "q1_s": q1,
        "q3_s": q3,
        "iqr_s": q3 - q1,
        "mean_s": float(t.mean()),
        "min_s": float(t.min()),
        "samples_per_s": batch_size / median,
        "noisy": bool((q3 - q1) > NOISY_IQR_RATIO * median) and batches is None,
    }


def _by_batch(times: list[float], batches: list[int]) -> list[np.ndarray]:
    t, b = np.asarray(times, dtype=np.float64), np.asarray(batches)
    return [t[b == k] for k in np.unique(b)]


def pass_mean(times: list[float], batches: list[int]) -> float:
    """Step time over a pass of batches that differ in size: the mean over batches of each
    batch's median step (step i ran batch ``batches[i]``). Never the median of mixed lengths,
    which depends on which lengths a partial window happened to hold."""
    return float(np.mean([np.median(t) for t in _by_batch(times, batches)]))


def pass_bootstrap(times: list[float], batches: list[int], seed: int = 0) -> np.ndarray:
    """Bootstrap samples of ``pass_mean``: steps resampled within each batch."""
    return np.mean([bootstrap_medians(t, seed + i) for i, t in enumerate(_by_batch(times, batches))], axis=0)


def step_time(times: list[float], batches: list[int] | None) -> float:
    """One process's step time: the median, or over a pass of variable-size steps, ``pass_mean``."""
    return float(np.median(times)) if batches is None else pass_mean(times, batches)


def tokens_per_step(rec: Record) -> float | None:
    """Tokens a step processes, on average over a pass of the dataset; None where the workload
    counts none. Decoding: what one untimed decode of every batch emitted, over the pass's batches
    (the timed window need not hold whole passes, and its own count depends on which batches it
    held). Otherwise ``tokens_per_step`` where combined rounds hold it (harness.stats.cells.combine),
    else one process's tokens/s times its window's mean step: the window's tokens over its steps
    (whole passes where steps differ in size)."""
    if rec.get("decode_captions"):
        return rec["decode_len_mean"] * rec["decode_captions"] / rec["spec"]["num_batches"]
    if (per_step := rec.get("tokens_per_step")) is not None:
        return float(per_step)
    if not (per_s := rec.get("tokens_per_s")):
        return None
    return per_s * (rec.get("mean_s") or rec["median_s"])

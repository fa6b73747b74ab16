"""Summary statistics of raw per-step times (seconds)."""

from __future__ import annotations

import numpy as np

#: A cell whose IQR exceeds this fraction of its median is flagged as noisy in the report.
NOISY_IQR_RATIO = 0.25


BOOTSTRAP_SAMPLES = 2000
#: Most resampled values held at once (8 MB of float64), whatever the number of steps.
BOOTSTRAP_CHUNK = 1_000_000


def median_ci(times: np.ndarray, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median (fixed seed: reproducible),
    resampled in chunks so memory stays bounded for long pooled windows."""
    rng = np.random.default_rng(seed)
    per_chunk = max(1, BOOTSTRAP_CHUNK // len(times))
    medians = np.concatenate(
        [
            np.median(rng.choice(times, size=(min(per_chunk, BOOTSTRAP_SAMPLES - done), len(times))), axis=1)
            for done in range(0, BOOTSTRAP_SAMPLES, per_chunk)
        ]
    )
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def summarize(step_times_s: list[float], batch_size: int) -> dict[str, float]:
    """Median with its 95% bootstrap CI, quartiles, IQR, mean and samples/s of step times."""
    if not step_times_s:
        raise ValueError("no step times to summarize")
    t = np.asarray(step_times_s, dtype=np.float64)
    q1, median, q3 = (float(v) for v in np.percentile(t, [25, 50, 75]))
    ci_low, ci_high = median_ci(t)
    return {
        "ci_low_s": ci_low,
        "ci_high_s": ci_high,
        "median_s": median,
        "q1_s": q1,
        "q3_s": q3,
        "iqr_s": q3 - q1,
        "mean_s": float(t.mean()),
        "min_s": float(t.min()),
        "samples_per_s": batch_size / median,
        "noisy": bool((q3 - q1) > NOISY_IQR_RATIO * median),
    }

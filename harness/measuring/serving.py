"""Timing a served forward (the export task): batch-1 latency and large-batch throughput, with
the training clock's contract (harness.measuring.timing), reused rather than rewritten.

A ``Forward`` takes a NumPy batch and returns the NumPy logits: the copy back to host memory is
its sync (torch's ``.cpu()``, JAX's ``block_until_ready``, TF's ``.numpy()``, ONNX Runtime's
``run``), so a timed call holds the whole request: placement, compute, answer. Both windows are
``timing.measure`` with ``chained=False`` (requests are independent):

latency: batch 1, the cold window (first calls) apart, then every call synced and timed alone
    for SERVE_PROFILE's budget; p50 and p99 of those calls (serving cares about tails, so the
    window runs its whole budget instead of stopping once the median is stable).
throughput: the large batch, its blocks of calls issued back to back; samples per second from
    the median block.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.measuring import timing

#: The serving windows: at least MIN_CALLS synced calls, then until the budget is spent or 5000 calls
#: (target_rel_iqr 0: never stop early, so p99 rests on as many calls as the budget buys).
MIN_CALLS = 100
SERVE_PROFILE = timing.Profile(
    "serve",
    warmup_steps=10,
    min_steps=MIN_CALLS,
    max_steps=5_000,
    budget_s=2.0,
    target_rel_iqr=0.0,
    rounds=1,
    timeout_s=600,
)


def profile(budget_s: float) -> timing.Profile:
    """SERVE_PROFILE with ``budget_s`` seconds for each window's synced calls."""
    return dataclasses.replace(SERVE_PROFILE, budget_s=budget_s)


def summary(out: Any) -> float:
    """A finite number from a forward's output (timing.measure's divergence check reads it)."""
    return float(np.sum(out))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` percentile (0-100) of ``values``, NumPy's linear rule; NaN when empty."""
    return float(np.percentile(values, q)) if values else math.nan


def measure(forward: Callable[[Any], Any], one: list[np.ndarray], many: list[np.ndarray], budget_s: float) -> dict:
    """Latency at batch 1 over the inputs ``one``, throughput over the large batches ``many``:
    flat fields for the record, raw call times kept."""
    prof = profile(budget_s)
    lat = timing.measure(forward, summary, one, prof, chained=False)
    thr = timing.measure(forward, summary, many, dataclasses.replace(prof, budget_s=budget_s / 2), chained=False)
    batch = len(many[0])
    block = float(np.median(thr.block_times_s)) if thr.block_times_s else math.nan
    return {
        "latency_cold_s": lat.cold_times_s,
        "latency_times_s": lat.step_times_s,
        "p50_s": percentile(lat.step_times_s, 50),
        "p99_s": percentile(lat.step_times_s, 99),
        "throughput_batch": batch,
        "throughput_block_calls": thr.block_steps,
        "throughput_block_times_s": thr.block_times_s,
        "throughput_per_s": batch * thr.block_steps / block if block > 0 else math.nan,
    }

"""The timing protocol. The harness holds the clock; adapters only run steps.

Per cell, two windows, every step timed on its own as ``step`` followed by ``sync`` (so
asynchronous dispatch can never hide device work), raw times kept:

cold window: the first ``max(1 + warmup_steps, len(batches))`` steps from a cold start. Its
    first step holds trace + compile + first run; covering the whole dataset means every batch
    shape has been seen (and compiled) before the steady window. Its sum is the time a user
    waits to train that many batches, every compile included.
steady window: then at least ``min_steps`` steps, continuing until the spread is small
    (IQR / median below ``target_rel_iqr``, checked every CHECK_EVERY steps), ``budget_s``
    runs out, or ``max_steps``; the median of these is the steady-state step time.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

Clock = Callable[[], float]


@dataclass(frozen=True)
class Profile:
    name: str
    warmup_steps: int
    min_steps: int
    max_steps: int
    budget_s: float
    """Most seconds of steady-window timing; adaptive repetition stops earlier once stable."""
    target_rel_iqr: float
    """Stop the steady window once IQR / median of its step times is below this."""
    repeats: int
    """Fresh worker processes per cell; their steady windows are pooled."""
    timeout_s: float
    """Per worker process, the whole of it."""


PROFILES = {
    "quick": Profile("quick", 5, 30, 5000, budget_s=2.0, target_rel_iqr=0.05, repeats=1, timeout_s=600),
    "full": Profile("full", 30, 200, 100_000, budget_s=15.0, target_rel_iqr=0.02, repeats=3, timeout_s=3600),
}
#: How often (in steps) the adaptive rule looks at the spread.
CHECK_EVERY = 10


class Diverged(RuntimeError):
    """A non-finite loss; ``step`` counts from 0 at the first step."""

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"diverged at step {step} (loss={loss})")
        self.step = step


@dataclass
class Measurement:
    cold_times_s: list[float]
    step_times_s: list[float]
    loss_first: float
    loss_last: float

    @property
    def first_step_s(self) -> float:
        return self.cold_times_s[0]


def measure(
    step_fn: Callable[[Any], Any],
    sync: Callable[[Any], float],
    batches: Sequence[Any],
    profile: Profile,
    clock: Clock = time.perf_counter,
    steady: AbstractContextManager | None = None,
) -> Measurement:
    """Run the timing protocol on placed batches; step i uses batch i % len(batches).

    ``sync`` returns the step's loss (or, for inference, any finite summary); a non-finite
    value raises Diverged. ``steady`` is entered around the steady window (GPU sampling).
    """
    step = 0

    def run_one() -> tuple[float, float]:
        nonlocal step
        t0 = clock()
        value = sync(step_fn(batches[step % len(batches)]))
        elapsed = clock() - t0
        if not math.isfinite(value):
            raise Diverged(step, value)
        step += 1
        return elapsed, value

    cold: list[float] = []
    values: list[float] = []
    for _ in range(max(1 + profile.warmup_steps, len(batches))):
        elapsed, value = run_one()
        cold.append(elapsed)
        values.append(value)

    times: list[float] = []
    with steady or contextlib.nullcontext():
        start = clock()
        while len(times) < profile.max_steps:
            if len(times) >= profile.min_steps and (
                clock() - start >= profile.budget_s or (len(times) % CHECK_EVERY == 0 and stable(times, profile))
            ):
                break
            elapsed, value = run_one()
            times.append(elapsed)
    return Measurement(cold, times, values[0], value)


def stable(times: list[float], profile: Profile) -> bool:
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    return bool(q3 - q1 < profile.target_rel_iqr * median)

"""The timing protocol. The harness holds the clock; adapters only run steps.

Per cell, two windows, every step timed on its own as ``step`` followed by ``sync`` (so
asynchronous dispatch can never hide device work), raw times kept:

cold window: the first ``max(1 + warmup_steps, len(batches))`` steps from a cold start. Its
    first step holds trace + compile + first run; covering the whole dataset means every batch
    shape has been seen (and compiled) before the steady window. Its sum is the time a user
    waits to train that many batches, every compile included.
steady window: then steps until both ``min_steps`` and ``budget_s`` are reached (or
    ``max_steps``); the median of these is the steady-state step time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Clock = Callable[[], float]


@dataclass(frozen=True)
class Profile:
    name: str
    warmup_steps: int
    min_steps: int
    max_steps: int
    budget_s: float
    timeout_s: float  # per cell, the whole worker process


PROFILES = {
    "quick": Profile("quick", warmup_steps=5, min_steps=30, max_steps=5000, budget_s=2.0, timeout_s=600),
    "full": Profile("full", warmup_steps=30, min_steps=200, max_steps=100_000, budget_s=15.0, timeout_s=3600),
}


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
) -> Measurement:
    """Run the timing protocol on placed batches; step i uses batch i % len(batches).

    ``sync`` returns the step's loss (or, for inference, any finite summary); a non-finite
    value raises Diverged.
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
    start = clock()
    while len(times) < profile.max_steps and (len(times) < profile.min_steps or clock() - start < profile.budget_s):
        elapsed, value = run_one()
        times.append(elapsed)
    return Measurement(cold, times, values[0], value)

"""The timing protocol. The harness holds the clock; adapters only run steps.

Per cell: the first step is timed alone (trace + compile + first run), then ``warmup_steps``
untimed steps, then timed steps until both ``min_steps`` and ``budget_s`` are reached (or
``max_steps``). Every timed step is ``train_step`` followed by ``sync``, so asynchronous
dispatch can never hide device work. Raw per-step times are kept.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import Adapter

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
    first_step_s: float
    warmup_steps: int
    step_times_s: list[float]
    loss_first: float
    loss_last: float


def measure(
    adapter: Adapter, batches: Sequence[Any], profile: Profile, clock: Clock = time.perf_counter
) -> Measurement:
    """Run the timing protocol on placed batches; step i uses batch i % len(batches)."""
    step = 0

    def run_one() -> float:
        nonlocal step
        loss = adapter.sync(adapter.train_step(batches[step % len(batches)]))
        if not math.isfinite(loss):
            raise Diverged(step, loss)
        step += 1
        return loss

    t0 = clock()
    loss_first = run_one()
    first_step_s = clock() - t0
    loss = loss_first
    for _ in range(profile.warmup_steps):
        loss = run_one()

    times: list[float] = []
    start = clock()
    while len(times) < profile.max_steps and (len(times) < profile.min_steps or clock() - start < profile.budget_s):
        t0 = clock()
        loss = run_one()
        times.append(clock() - t0)
    return Measurement(first_step_s, profile.warmup_steps, times, loss_first, loss)

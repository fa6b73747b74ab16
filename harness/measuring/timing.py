"""The timing protocol. The harness holds the clock; adapters only run steps.

Per cell, two windows, every step timed on its own as ``step`` followed by ``sync`` (so
asynchronous dispatch can never hide device work), raw times kept:

cold window: the first ``max(1 + warmup_steps, len(batches))`` steps from a cold start. Its
    first step holds trace + compile + first run; covering the whole dataset means every batch
    shape has been seen (and compiled) before the steady window. Where the adapter counts its
    compiles, the cold window goes on, a pass over the dataset at a time, until a whole pass
    ran without compiling (at most MAX_COLD_PASSES passes). Its sum is the time a user waits to
    train that many batches, every compile included.
steady window: then at least ``min_steps`` steps, continuing until the spread is small
    (IQR / median below ``target_rel_iqr``, checked every CHECK_EVERY steps), ``budget_s``
    runs out, or ``max_steps``; the median of these is the steady-state step time. A step
    during which the compile count rose (a recompile) is kept apart, not in the statistics.
    Where steps differ in size (variable-length batches), it stops on whole passes only and
    the step time is the mean over a pass of each batch's median (harness.stats.steps.pass_mean).
pipelined window: then blocks of K steps issued back to back with one ``sync`` at the end of
    each block, as a training loop runs them (dispatch overlaps device work). K makes a block
    last about BLOCK_S at the steady step time (a whole number of passes, with ``pass_steps``,
    when steps differ in size). At least MIN_BLOCKS blocks, then until half ``budget_s`` is
    spent; a block during which the adapter compiled is dropped and counted. The synced steps
    give latency, the blocks throughput.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
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
    """Most seconds of steady-window timing; adaptive repetition stops earlier once stable."""
    target_rel_iqr: float
    """Stop the steady window once IQR / median of its step times is below this."""
    rounds: int
    """Fresh worker processes per cell, interleaved with the other cells' (harness.running.rounds)."""
    timeout_s: float
    """Per worker process, the whole of it."""
    turn_s: float = 2.0
    """Resident workers taking turns (harness.running.turns): seconds of turns per cell of a
    generation (its steady window, shared with the other cells of its group)."""


#: The test suite's runs are tiny and assert no timing (tests/conftest.py sets DLCOMPARE_QUICK_TURNS):
#: their quick generations take turns for a quarter of the time, still at least MIN_TURNS kept turns,
#: and wait for a quiet machine briefly (harness.running.turns). Read at import, so the parent and its
#: workers agree and every record's ``protocol`` says what ran. Users never set it.
QUICK_TURNS = bool(os.environ.get("DLCOMPARE_QUICK_TURNS"))
QUICK_TURN_S = 0.5 if QUICK_TURNS else 2.0

# quick: 3 rounds, since a verdict between two cells rests on their processes: at 2, a pair whose
# own spread exceeds its group's has 1 degree of freedom. The calibration on the 2-core AMD EPYC VM
# (reports/2026-11-24-calibration) found a 10% slow-down in 57% of pairs at 2 generations, 90% at 3.
PROFILES = {
    "quick": Profile(
        "quick", 5, 30, 5000, budget_s=0.6, target_rel_iqr=0.05, rounds=3, timeout_s=600, turn_s=QUICK_TURN_S
    ),
    "full": Profile("full", 30, 200, 100_000, budget_s=6.0, target_rel_iqr=0.02, rounds=5, timeout_s=3600, turn_s=10.0),
}
#: How often (in steps) the adaptive rule looks at the spread.
CHECK_EVERY = 10
#: The cold window gives up waiting for a compile-free pass after this many passes.
MAX_COLD_PASSES = 8
#: Seconds a pipelined block should take: long against one sync, short against the budget.
BLOCK_S = 0.03
MIN_BLOCKS = 5
MAX_BLOCKS = 1000
MAX_BLOCK_STEPS = 10_000


def protocol(profile: Profile) -> dict[str, Any]:
    """Every setting a cell was timed with, as its record keeps it: the report's Method is
    written from this, so it describes what ran, not what today's code would run."""
    constants = {"check_every": CHECK_EVERY, "max_cold_passes": MAX_COLD_PASSES}
    return {**dataclasses.asdict(profile), **constants, "block_s": BLOCK_S, "min_blocks": MIN_BLOCKS}


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
    step_batches: list[int] = dataclasses.field(default_factory=list)
    """The batch index each entry of ``step_times_s`` ran."""
    recompile_times_s: list[float] = dataclasses.field(default_factory=list)
    """Steady-window steps during which the adapter compiled: kept apart from ``step_times_s``."""
    cold_settled: bool | None = None
    """Whether the cold window ended on a compile-free pass; None without a compile count."""
    block_steps: int = 0
    """Steps per pipelined block (0: no pipelined window was run)."""
    block_times_s: list[float] = dataclasses.field(default_factory=list)
    """Each pipelined block's time, issue of its first step to the end of its one sync."""
    block_recompiles: int = 0

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
    compiles: Callable[[], int] | None = None,
    pass_steps: int = 1,
    chained: bool = True,
    blocks: bool = True,
    warm: bool = False,
) -> Measurement:
    """Run the timing protocol on placed batches; step i uses batch i % len(batches).

    ``sync`` returns the step's loss (or, for inference, any finite summary); a non-finite
    value raises Diverged. ``steady`` is entered around the steady window (GPU sampling).
    ``compiles`` returns the adapter's cumulative trace + compile count (read between steps,
    off the clock); without it, recompiles cannot be told apart. ``pass_steps`` > 1 (steps that
    differ in size): the steady window and every pipelined block hold whole passes over the
    dataset, so each batch counts alike. ``chained`` (training: each step reads the parameters
    the previous one wrote): a block's one sync of its last step covers the block; otherwise
    (inference: independent steps) every step of a block is synced at its end. ``blocks=False``:
    no pipelined blocks (a dispatch floor needs the synced steps alone). ``warm``: the step ran its
    cold window already (a prepared dispatch floor), so none is run or reported (``cold_times_s``
    empty, ``loss_first`` the steady window's first loss).
    """
    stepper = Stepper(step_fn, sync, batches, clock, compiles)
    count, run_one = stepper.count, stepper.one
    cold, values, settled = ([], [], None) if warm else stepper.cold_window(profile)
    value = values[-1] if values else math.nan

    times: list[float] = []
    kept: list[int] = []
    ordered: list[float] = []
    recompiled: list[float] = []
    with steady or contextlib.nullcontext():
        start = clock()
        while len(times) + len(recompiled) < profile.max_steps:
            spent = clock() - start >= profile.budget_s
            # Steps of different sizes stop on whole passes only, so every batch counts alike.
            boundary = (len(times) + len(recompiled)) % pass_steps == 0
            check = len(times) % CHECK_EVERY == 0 if pass_steps == 1 else boundary
            if boundary and len(times) >= profile.min_steps and (spent or (check and stable(ordered, profile))):
                break
            if boundary and spent and len(times) + len(recompiled) >= profile.min_steps:
                break  # recompiles took the budget; what ran is reported, recompiles apart
            before, batch = count(), stepper.step % len(batches)
            elapsed, value = run_one()
            if not values:  # warm: the steady window's first loss is the first
                values.append(value)
            if count() != before:
                recompiled.append(elapsed)
            else:
                times.append(elapsed)
                kept.append(batch)
                bisect.insort(ordered, elapsed)  # the stability check reads quantiles without sorting
    m = Measurement(cold, times, values[0], value, kept, recompiled, settled)
    if times and blocks:
        per_block = min(MAX_BLOCK_STEPS, BLOCK_S / max(quantile(ordered, 0.5), 1e-9))
        m.block_steps = pass_steps * math.ceil(per_block / pass_steps)
        start = clock()
        while len(m.block_times_s) + m.block_recompiles < MIN_BLOCKS or (
            clock() - start < profile.budget_s / 2 and len(m.block_times_s) < MAX_BLOCKS
        ):
            before = count()
            elapsed, value = stepper.block(m.block_steps, chained)
            if count() != before:
                m.block_recompiles += 1
            else:
                m.block_times_s.append(elapsed)
        m.loss_last = value
    return m


class Stepper:
    """Runs an adapter's steps over placed batches (step i takes batch i % len(batches)), each
    synced and timed alone (``one``) or issued back to back with one sync (``block``); a
    non-finite loss raises Diverged. ``count`` reads the cumulative compile count (0 without one)."""

    def __init__(
        self,
        step_fn: Callable[[Any], Any],
        sync: Callable[[Any], float],
        batches: Sequence[Any],
        clock: Clock = time.perf_counter,
        compiles: Callable[[], int] | None = None,
    ) -> None:
        self.step_fn, self.sync, self.batches, self.clock = step_fn, sync, batches, clock
        self.counted = compiles is not None
        self.count = compiles or (lambda: 0)
        self.step = 0

    def one(self) -> tuple[float, float]:
        """One synced step: (seconds, loss)."""
        t0 = self.clock()
        value = self.sync(self.step_fn(self.batches[self.step % len(self.batches)]))
        elapsed = self.clock() - t0
        if not math.isfinite(value):
            raise Diverged(self.step, value)
        self.step += 1
        return elapsed, value

    def block(self, steps: int, chained: bool = True) -> tuple[float, float]:
        """``steps`` steps issued back to back, then synced: (seconds, last loss). ``chained``
        (training): the last step's sync covers the block; else every step is synced at its end."""
        t0 = self.clock()
        handles: list[Any] = []
        for _ in range(steps):
            handle = self.step_fn(self.batches[self.step % len(self.batches)])
            handles = [handle] if chained else [*handles, handle]
            self.step += 1
        values = [self.sync(h) for h in handles]
        elapsed = self.clock() - t0
        if not all(math.isfinite(v) for v in values):
            raise Diverged(self.step - 1, next(v for v in values if not math.isfinite(v)))
        return elapsed, values[-1]

    def cold_window(self, profile: Profile) -> tuple[list[float], list[float], bool | None]:
        """The cold window (module docstring): its step times, their losses, and whether it ended
        on a compile-free pass (None without a compile count)."""
        cold: list[float] = []
        values: list[float] = []
        for _ in range(max(1 + profile.warmup_steps, len(self.batches))):
            elapsed, value = self.one()
            cold.append(elapsed)
            values.append(value)
        if not self.counted:
            return cold, values, None
        for _ in range(MAX_COLD_PASSES):
            before = self.count()
            for _ in range(len(self.batches)):
                elapsed, value = self.one()
                cold.append(elapsed)
                values.append(value)
            if self.count() == before:
                return cold, values, True
        return cold, values, False


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of an already sorted list (linear interpolation, as NumPy's default)."""
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def stable(ordered: list[float], profile: Profile) -> bool:
    """IQR / median below the profile's target, on step times kept sorted as they come."""
    q1, median, q3 = (quantile(ordered, q) for q in (0.25, 0.5, 0.75))
    return bool(q3 - q1 < profile.target_rel_iqr * median)

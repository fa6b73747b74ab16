"""Measuring an input pipeline while it feeds the steps (``--data loader`` on image workloads).

Each timed step of a pipeline cell is ``next(stream)`` then the step, then ``sync``
(harness.measuring.timing): the previous step was synced before the draw, so the draw's time is time the
training loop waited for its next batch and nothing else. :class:`WaitMeter` times every draw;
entered around the steady window, it marks which draws belong to it. :class:`CpuMeter` reads
the CPU time of this process and its children (the pipeline's worker processes) over the same
window. :func:`throughput` is the pipeline alone, with no training: the ceiling it sets on the
step rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psutil

Clock = Callable[[], float]


class WaitMeter:
    """Draws from ``stream`` through :meth:`next`, timing each; a context manager marking the
    draws of the window it is entered around (``steady``)."""

    def __init__(self, stream: Iterator[Any], clock: Clock = time.perf_counter) -> None:
        self.stream = stream
        self.clock = clock
        self.waits: list[float] = []
        self._window = (0, 0)
        self._primed: list[Any] = []
        self.start_s: float | None = None

    def prime(self) -> None:
        """Draw the first batch now, off the steps' clock: worker start-up (processes spawned,
        modules imported) is the pipeline's set-up, timed as ``start_s``, not the first step's."""
        t0 = self.clock()
        self._primed.append(next(self.stream))
        self.start_s = self.clock() - t0

    def next(self) -> Any:
        t0 = self.clock()
        item = self._primed.pop() if self._primed else next(self.stream)
        self.waits.append(self.clock() - t0)
        return item

    def __enter__(self) -> WaitMeter:
        self._window = (len(self.waits), len(self.waits))
        return self

    def __exit__(self, *exc: object) -> None:
        self._window = (self._window[0], len(self.waits))

    @property
    def steady(self) -> list[float]:
        """The waits of the steady window's steps, in order (recompiled steps included)."""
        return self.waits[slice(*self._window)]


def _tree_cpu(proc: psutil.Process) -> dict[tuple[int, float], tuple[float, bool]]:
    """CPU seconds (user + system) of ``proc`` and each of its descendants, keyed by (pid,
    start time) so a reused pid is not mistaken for the same process; the flag marks children."""
    out = {}
    for p, child in [(proc, False), *((c, True) for c in proc.children(recursive=True))]:
        try:
            t = p.cpu_times()
            out[(p.pid, p.create_time())] = (t.user + t.system, child)
        except psutil.Error:  # exited between listing and reading
            continue
    return out


class CpuMeter:
    """Context manager: the cores this process tree kept busy while it was entered.

    ``cores`` is CPU seconds over wall seconds (2.0: two cores fully busy), ``worker_cores``
    the part spent in child processes (the pipeline's workers), ``util`` ``cores`` over the
    machine's logical CPUs. A child that exits inside the window loses its share (pipelines
    keep their workers for the whole run)."""

    def __init__(self, clock: Clock = time.perf_counter, proc: psutil.Process | None = None) -> None:
        self.clock = clock
        self.proc = proc or psutil.Process()
        self.cores: float | None = None
        self.worker_cores: float | None = None
        self.util: float | None = None

    def __enter__(self) -> CpuMeter:
        self._before = _tree_cpu(self.proc)
        self._t0 = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = self.clock() - self._t0
        after = _tree_cpu(self.proc)
        spent = {k: (v - self._before.get(k, (0.0, child))[0], child) for k, (v, child) in after.items()}
        if wall <= 0:
            return
        self.cores = sum(s for s, _ in spent.values()) / wall
        self.worker_cores = sum(s for s, child in spent.values() if child) / wall
        self.util = self.cores / (psutil.cpu_count() or 1)


def throughput(
    draw: Callable[[], Any], budget_s: float, drain: int, clock: Clock = time.perf_counter, min_batches: int = 5
) -> float:
    """Batches per second the pipeline delivers alone: ``drain`` draws untimed (what it had
    buffered while the steps ran), then draws until ``budget_s`` has passed and at least
    ``min_batches`` were drawn."""
    for _ in range(drain):
        draw()
    n, t0 = 0, clock()
    while n < min_batches or clock() - t0 < budget_s:
        draw()
        n += 1
    return n / (clock() - t0)


def wait_fields(meter: WaitMeter, step_times_s: list[float], recompile_times_s: list[float]) -> dict[str, Any]:
    """Record fields from the steady window: every draw's wait, the median wait, and the
    input-bound share (time waiting for batches over the window's step time, recompiled steps
    included on both sides); ``compute_median_s``: the median step without its wait."""
    waits = meter.steady
    total = sum(step_times_s) + sum(recompile_times_s)
    fields: dict[str, Any] = {
        "wait_times_s": waits,
        "wait_median_s": float(np.median(waits)) if waits else None,
        "input_bound_share": sum(waits) / total if waits and total > 0 else None,
    }
    if waits and not recompile_times_s and len(waits) == len(step_times_s):
        fields["compute_median_s"] = float(np.median(np.subtract(step_times_s, waits)))
    return fields

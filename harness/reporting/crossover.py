"""CPU against GPU along a sweep: where the GPU starts to win, per adapter and swept field.

At each swept value where an adapter ran on both devices, the pair's verdict is the ratio
time(cpu) / time(gpu), the GPU's speed-up (verdicts.pair_verdict on the two cells, each pair on its
own, not family-wise). The crossover is the smallest value from which the GPU is separated faster at
every larger value swept: "the GPU is faster from hidden=1024 on". It lies between that value and
the one before it, which the sentence names with its own verdict; a range where the GPU never
settles its lead says so instead. The verdicts rank synced steps (each step waits for the device);
where a loop that never syncs (the pipelined step) crosses over elsewhere, the sentence adds that
crossover, from the ratios alone. With one process per cell no pair is judged, and the crossover
is read from the ratios alone and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tabulate import tabulate

from harness.records import Record, overrides_of
from harness.reporting.cells import strategy
from harness.reporting.formatting import verdict_text
from harness.stats.verdicts import FASTER, SAME, SLOWER, PairVerdict, pair_verdict

#: The devices a crossover compares: the GPU against the CPU of the same machine.
CPU, GPU = "cpu", "cuda"


@dataclasses.dataclass(frozen=True)
class DeviceCrossover:
    """One adapter along one swept field: ``points`` holds (value, time(cpu) / time(gpu)) at each
    value both devices ran, in increasing order."""

    workload: str
    field: str
    series: str
    points: tuple[tuple[float, PairVerdict], ...]
    #: (value, pipelined time(cpu) / time(gpu)) where both cells timed pipelined blocks: what a
    #: training loop that never syncs gets, a ratio alone (the verdicts rank synced steps)
    pipelined: tuple[tuple[float, float], ...] = ()

    @property
    def judged(self) -> bool:
        """Whether any value's pair could be judged (each cell ran in two processes or more);
        where none could, the crossover is read from the ratios alone and says so."""
        return any(v.judged for _, v in self.points)

    def _gpu_faster(self, verdict: PairVerdict) -> bool:
        # time(cpu)/time(gpu) separated above 1: the CPU is slower
        return verdict.outcome == SLOWER if self.judged else verdict.point > 1

    @property
    def gpu_from(self) -> float | None:
        """The smallest value from which the GPU is faster at every value swept (separated; by
        the ratio alone where no pair is judged), or None where it is not faster at the largest."""
        start = None
        for value, verdict in reversed(self.points):
            if not self._gpu_faster(verdict):
                break
            start = value
        return start

    @property
    def pipelined_from(self) -> float | None:
        """As ``gpu_from`` for the pipelined steps' ratios (no verdict: a ratio above 1)."""
        start = None
        for value, ratio in reversed(self.pipelined):
            if ratio <= 1:
                break
            start = value
        return start

    def sentence(self) -> str:
        """One line: where the GPU wins, with the verdicts either side of the crossover, and
        where it wins for a loop that never syncs (pipelined steps), where that differs."""
        text = self._sentence()
        if not self.judged:
            text = text.replace(": ", ", by the ratios alone (one process per cell: no pair judged): ", 1)
        if len(self.pipelined) < 2 or self.pipelined_from == self.gpu_from:
            return text
        start = self.pipelined_from
        if start is None:
            where = "the GPU is not faster at the largest value"
        elif start == self.pipelined[0][0]:
            where = f"the GPU is faster at every value, {self.pipelined[0][1]:.2f}x at {self.field}={start:g}"
        else:
            where = f"the GPU is faster from {self.field}={start:g} on ({dict(self.pipelined)[start]:.2f}x)"
        return f"{text}; pipelined, as a loop that never syncs runs (ratios alone): {where}"

    def _sentence(self) -> str:
        at = f"{self.field}="
        first, last = self.points[0][0], self.points[-1][0]
        start = self.gpu_from
        head = f"{self.series} on {self.workload}"
        if start is None:
            cpu_faster = (v.outcome == FASTER if self.judged else v.point < 1 for _, v in self.points)
            if all(cpu_faster):
                return (
                    f"{head}: the CPU is faster at every {self.field} swept ({first:g} to {last:g}; "
                    f"{_speedup(self.points[-1][1])} at {last:g}): no crossover in the range"
                )
            return f"{head}: no crossover settled, at {at}{last:g} {_state(self.points[-1][1])}"
        verdict = dict(self.points)[start]
        if start == first:
            return (
                f"{head}: the GPU is faster at every {self.field} swept, from {at}{first:g} "
                f"({_speedup(verdict)} there): the crossover lies below the range"
            )
        before, before_verdict = next((v, p) for v, p in reversed(self.points) if v < start)
        return (
            f"{head}: the GPU is faster from {at}{start:g} on ({_speedup(verdict)}); "
            f"at {at}{before:g} {_state(before_verdict)}"
        )


def _speedup(verdict: PairVerdict) -> str:
    """The GPU's speed-up with its interval, or the ratio alone where the pair is not judged."""
    return f"GPU speed-up {_ratio(verdict)}"


def _state(verdict: PairVerdict) -> str:
    """What a pair says at one value, for the sentence (by its ratio where it is not judged)."""
    if not verdict.judged:
        return f"the {'GPU' if verdict.point > 1 else 'CPU'} is faster ({_speedup(verdict)})"
    what = {FASTER: "the CPU is faster", SLOWER: "the GPU is faster", SAME: "they run at the same speed"}
    return f"{what.get(verdict.outcome, 'the pair is unresolved')} ({_speedup(verdict)})"


def device_crossovers(recs: Sequence[Record]) -> list[DeviceCrossover]:
    """Every adapter (strategy and other settings apart) swept on both the CPU and the GPU, per
    workload and swept field, with at least two values where both ran."""
    both: dict[tuple, dict[float, dict[str, Record]]] = {}
    for r in recs:
        sweep = r.get("sweep")
        if not sweep or r["status"] != "ok" or r.get("data", "resident") != "resident" or r.get("machine_label"):
            continue
        if r.get("device") not in (CPU, GPU):
            continue
        others = tuple(f"{k}={v}" for k, v in overrides_of(r).items() if k not in (sweep["field"], "strategy"))
        series = " / ".join(filter(None, [r["adapter"], strategy(r), *others]))
        key = (r["workload"], sweep["field"], series)
        both.setdefault(key, {}).setdefault(sweep["value"], {})[r["device"]] = r
    found = []
    for (workload, field, series), by_value in sorted(both.items()):
        points = tuple(
            (value, pair_verdict(pair[GPU], pair[CPU]))
            for value, pair in sorted(by_value.items())
            if CPU in pair and GPU in pair
        )
        pipelined = tuple(
            (value, pair[CPU]["pipelined_s"] / pair[GPU]["pipelined_s"])
            for value, pair in sorted(by_value.items())
            if CPU in pair and GPU in pair and pair[CPU].get("pipelined_s") and pair[GPU].get("pipelined_s")
        )
        if len(points) >= 2:
            found.append(DeviceCrossover(workload, field, series, points, pipelined))
    return found


def speedup_table(found: Sequence[DeviceCrossover]) -> str:
    """The GPU's speed-up (time on the CPU over time on the GPU) at each swept value, one row per
    adapter with its verdict (the ratio alone where the pair is not judged), and a row of the
    pipelined steps' ratios where they were timed: the numbers the crossover sentences quote."""
    values = sorted({v for c in found for v, _ in c.points} | {v for c in found for v, _ in c.pipelined})
    field = found[0].field if found else ""
    rows = []
    for c in found:
        synced, piped = dict(c.points), dict(c.pipelined)
        rows.append([c.series, *(_ratio(synced[v]) if v in synced else "—" for v in values)])
        if piped:
            rows.append([f"{c.series}, pipelined", *(f"{piped[v]:.2f}" if v in piped else "—" for v in values)])
    headers = ["time on the CPU / on the GPU", *(f"{field}={v:g}" for v in values)]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _ratio(verdict: PairVerdict) -> str:
    return verdict_text(verdict) if verdict.judged else f"{verdict.point:.2f}"


def crossover_lines(recs: Sequence[Record]) -> list[str]:
    """The first screen's CPU-against-GPU lines of a sweep run: one per adapter and swept field."""
    return [c.sentence() for c in device_crossovers(recs)]

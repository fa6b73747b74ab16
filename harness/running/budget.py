"""What a run's time buys: the order of its generations, how long each takes turns, and, with a
time budget, which generations still start and which further generations it adds, up to
MAX_GENERATIONS a group. A generation itself runs in harness.running.turns.

Round 1 of every group comes first (every cell present, whatever the budget), then each group's
further rounds together, the cheapest group first (``cheapest_first``), so a budget that runs out
leaves as many groups judged as it holds rather than all unjudged. A budget buys generations, not
longer ones: between-process spread dominates a verdict's error. A generation after the first
starts only where its estimate (its group's latest generation, less the cold compiles a warm start
saves and the start that side-by-side starts save: ``next_generation_s``) fits in what is left,
and a second only where a third fits beside it (``committed_s``): two generations never decide a
pair, so the seconds go to other groups instead. What is left after the planned rounds buys
further generations by time alone (``more_generations``): no verdict is read to decide which group
gets one, so each verdict is read once, at VERDICT_LEVEL.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from adapters import AdapterInfo
from harness import processes, records
from harness.measuring import timing
from harness.records import Cell, Record, round_of
from harness.running import runner, turns
from harness.running.sink import RoundSink
from harness.running.turns import Turns, group_of, servable
from harness.stats.generation_costs import (
    committed_s,
    generations_named,
    next_generation_s,
    start_factor,
    warm_shares,
)
from harness.stats.verdicts import MIN_GENERATIONS

#: With a budget, the share of what is left that a generation's turns may take (the rest is
#: start-up: imports, set-up, compiles), down to a quarter of the profile's turn seconds.
TURN_SHARE = 0.4
#: Seconds a run's closing keeps back for its report and what follows its peaks: the report of
#: the 40-minute default run (165 pairs, 9 plots) took about 5 s on the 2-core VM.
REPORT_S = 30.0
#: Generations a group may get when a budget adds them (``more_generations``): a 5th only once
#: every group has 4, so the cheap groups (mlp, cnn: about a minute a generation on the 2-core VM)
#: take what the dearest's cannot use (4 in the looks protocol, whose Pocock level covered looks at
#: generations 3 and 4: VERDICT_LEVEL).
MAX_GENERATIONS = 5
#: The level of every run's verdicts, read once. A budget buys generations by time alone, in an
#: order fixed before any verdict is read (``more_generations``), so whether a group gets another
#: generation never depends on its verdicts and no look needs a stricter level. The looks protocol
#: this replaced gave a budget's further generations to the groups with unsettled verdicts and judged
#: at Pocock's 97.06% for those looks (harness.calibrate's ``--looks`` judges it; its records are
#: schema 1, harness.records); no 11-adapter group of a default run or calibration was ever settled
#: after three generations, so the looks stopped nothing and cost intervals about a fifth wider (t on
#: 6 df: 2.97 against 2.45).
VERDICT_LEVEL = 0.95


@dataclass
class Budget:
    """A run's time budget in seconds (None: no budget, fixed generations), counted from the
    start of this process (the bench command: its doctor, peaks and floors are in it)."""

    total_s: float | None
    t0: float = field(default_factory=lambda: time.monotonic() - processes.age_s())
    #: Seconds kept back for the run's closing (its peaks again and the report): see keep_back_for_closing.
    reserve_s: float = 0.0

    def spent(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds a generation may still start in (the closing's reserve excluded)."""
        return math.inf if self.total_s is None else self.total_s - self.spent() - self.reserve_s

    def keep_back_for_closing(self, peaks_s: float | None = None) -> None:
        """Keep back the run's closing (the device peaks again, the report): without it a run whose
        last generation fitted ended that much past its budget. ``peaks_s``: what the start's device
        peaks took (env.json's ``phases_s``), so the closing is that and REPORT_S; unknown, it is
        as much as the run has spent so far (imports, doctor, peaks, kernel floors). Never more
        than that."""
        spent = self.spent()
        self.reserve_s = spent if peaks_s is None else min(spent, peaks_s + REPORT_S)


def generation_s(results: Path, cells: Sequence[Cell]) -> float:
    """What a further generation of these cells should take (``next_generation_s``, with the
    run's ``warm_shares`` and ``start_factor``), 0 where none is recorded. A generation is started
    only when this fits in what is left of a budget."""
    ids = {c["cell_id"] for c in cells}
    done = records.load(results) if results.exists() else []
    shares = warm_shares(done)
    mine = [r for r in done if r.get("cell_id") in ids]
    return next_generation_s(mine, shares, start_factor(done, shares))


def floors_s(results: Path, cells: Sequence[Cell]) -> float:
    """What timing the dispatch floors still missing among ``cells`` should take: each such cell's
    set-up and cold window in its first process (a floor is a second, tiny instance of the
    adapter, set up, compiled and timed the same way; the floors measured in the 2026-11-25
    default run took 0.4-1.4x that). 0 where none is recorded."""
    done = records.load(results) if results.exists() else []
    ids = {c["cell_id"] for c in cells} - turns.floored(done)
    return sum(
        (r.get("setup_s") or 0.0) + sum(r.get("cold_times_s") or [])
        for r in done
        if r.get("cell_id") in ids and round_of(r) == 1
    )


def turn_seconds(cells: Sequence[Cell]) -> float:
    """Seconds of turns a generation of these cells takes without a budget: its profile's
    ``turn_s`` per cell."""
    return sum(timing.PROFILES[c["profile"]].turn_s for c in cells)


def run(
    order: Sequence[tuple[Cell, int]],
    adapters: Mapping[str, AdapterInfo],
    sink: RoundSink,
    budget: Budget | None = None,
    level: float = VERDICT_LEVEL,
) -> None:
    """Run (cell, round) pairs (harness.running.rounds.schedule) into ``sink``: each round of a
    group as one generation taking turns, round 1 of every group before any further round, then
    each group's further rounds one after another; cells that cannot take turns alone. With a
    ``budget``, a round after the first is not started once it is spent, and what is left after
    the planned rounds goes to more generations (``more_generations``), up to MAX_GENERATIONS.
    Records of generations carry ``verdict_level`` (and ``budget_s``, the run's budget)."""
    budget = budget or Budget(None)
    try:
        _run(order, adapters, sink, budget, level)
    finally:
        shutil.rmtree(turns.cache_root(sink.results), ignore_errors=True)


def _run(
    order: Sequence[tuple[Cell, int]],
    adapters: Mapping[str, AdapterInfo],
    sink: RoundSink,
    budget: Budget,
    level: float,
) -> None:
    extra: dict[str, Any] = {"verdict_level": level, "rounds": sink.rounds}  # the fields in the order they had
    if budget.total_s is not None:
        extra["budget_s"] = budget.total_s
    solo = [(c, k) for c, k in order if not servable(c)]
    generations: dict[tuple[int, str], list[Cell]] = {}
    for cell, k in order:
        if servable(cell):
            generations.setdefault((k, group_of(cell)), []).append(cell)
    if solo:
        runner.run_cells(solo, adapters, sink)
    turn = turns.next_turn(sink.results)
    # Round 1 of every group first (every cell present, whatever the budget), then a group's
    # further rounds together: a budget that runs out leaves some groups judged, not all unjudged.
    order_of: dict[str, int] = {}
    for _, g in generations:
        order_of.setdefault(g, len(order_of))
    pending = sorted(generations.items(), key=lambda item: (item[0][0] > 1, order_of[item[0][1]], item[0][0]))
    dropped: set[str] = set()  # groups whose next generation did not fit: none of their later ones runs
    ranked = False
    while pending:
        if not ranked and pending[0][0][0] > 1:
            pending = cheapest_first(pending, sink.results, order_of)
            ranked = True
        (k, g), cells = pending.pop(0)
        cells = [c for c in cells if c["cell_id"] not in sink.ended]
        if not cells:
            continue
        cost = generation_s(sink.results, cells)
        need = committed_s(cost, k)
        if k > 1 and (g in dropped or budget.left() < need):
            if g not in dropped:  # said when it is decided, not first at the report's end
                sink.progress.say(not_started(cells[0], k, sink.rounds, need, budget.left()))
            dropped.add(g)
            for _ in cells:
                sink.progress.drop()
            continue
        # The floors in the group's last planned generation, where they fit beside it and the
        # planned generations still to run: those are what the verdicts need.
        ahead = sum(generation_s(sink.results, c) for (_, g2), c in pending if g2 not in dropped)
        floors = k >= sink.rounds and budget.left() >= cost + ahead + floors_s(sink.results, cells)
        parts = turns.split(
            cells, turns.resident_limit(cells[0]["device_requested"], worker_bytes=cells[0].get("worker_bytes"))
        )
        for i, part in enumerate(parts):
            seconds = turn_seconds(part)
            if budget.total_s is not None:
                # never more than the profile's turns: between-process spread dominates a verdict's
                # error, so a budget's seconds buy generations, not longer ones (round 1 of mlp took
                # 104 turns where later generations took 29)
                seconds = min(seconds, max(seconds / 4, budget.left() * TURN_SHARE / (1 + len(pending))))
            group = group_of(part[0]) + (f"#part{i + 1}" if len(parts) > 1 else "")
            turn = turns.run_generation(part, k, adapters, sink, Turns(seconds), turn, extra, group, floors)
            sink.generation_ended()
    if budget.total_s is not None:
        more_generations(adapters, sink, budget, turn, extra)


def not_started(cell: Cell, k: int, rounds: int, need_s: float, left_s: float) -> str:
    """The line a run prints where its budget drops a group's planned generations ``k`` to
    ``rounds``: what they need (``committed_s``: up to the third, which a verdict needs), what is
    left, and what the group's verdicts then rest on."""
    what = " ".join(filter(None, [cell["workload"], *cell.get("overrides", []), cell["device_requested"]]))
    rest = (
        f"its pairs stay unresolved (a pair needs {MIN_GENERATIONS} generations)"
        if k <= MIN_GENERATIONS
        else f"its verdicts rest on {k - 1} generations"
    )
    return (
        f"{what}: {generations_named(k, rounds)} not started, needing about {need_s / 60:.1f} minutes where the "
        f"budget has {max(left_s, 0.0) / 60:.1f} left; {rest} (the report says how much more time they needed)"
    )


def cheapest_first(
    pending: list[tuple[tuple[int, str], list[Cell]]], results: Path, order_of: Mapping[str, int]
) -> list[tuple[tuple[int, str], list[Cell]]]:
    """The further generations after round 1, the group whose next generation should cost least
    first (``generation_s``; the plan's order among equals), each group's in order: a budget that
    runs short then leaves the most groups judged, and the cheap groups' warm generations measure
    what warm and side-by-side starts save (``warm_shares``, ``start_factor``) before the dearest
    group's estimate is read."""
    first: dict[str, list[Cell]] = {}
    for (_, g), cells in pending:
        first.setdefault(g, cells)
    cost = {g: generation_s(results, cells) for g, cells in first.items()}
    return sorted(pending, key=lambda item: (cost[item[0][1]], order_of[item[0][1]], item[0][0]))


def more_generations(
    adapters: Mapping[str, AdapterInfo], sink: RoundSink, budget: Budget, turn: int, extra: Mapping[str, Any]
) -> None:
    """With budget left after the planned rounds: another generation of a group of two cells or
    more below MAX_GENERATIONS, the one with the fewest generations and among those the cheapest
    (``next_generation_s``: a generation adds one process to every pair of its group, so the
    cheapest buys the most per minute), while one fits in what is left. Its verdicts are not read
    (VERDICT_LEVEL)."""
    while budget.left() > 0:
        recs = records.load(sink.results)
        shares = warm_shares(recs)
        factor = start_factor(recs, shares)
        by_group: dict[str, list[Record]] = {}
        for r in recs:
            if r.get("group"):
                by_group.setdefault(str(r["group"]), []).append(r)
        candidates = []
        for group, mine in by_group.items():
            k = max(round_of(r) for r in mine)
            cells = {r["cell_id"]: r for r in mine if r["status"] == "ok" and r["cell_id"] not in sink.ended}
            cost = next_generation_s(mine, shares, factor)
            if len(cells) >= 2 and k < MAX_GENERATIONS and committed_s(cost, k + 1) < budget.left():
                candidates.append((k, cost, group, cells))
        if not candidates:
            return
        k, cost, group, cells = min(candidates, key=lambda c: c[:3])
        planned = [_cell_of(r) for r in cells.values()]
        sink.progress.add(len(planned))
        seconds = turn_seconds(planned)
        floors = budget.left() >= cost + floors_s(sink.results, planned)
        turn = turns.run_generation(planned, k + 1, adapters, sink, Turns(seconds), turn, extra, group, floors)
        sink.generation_ended()


#: Fields of a record that its worker measured; what is left is the cell as planned.
def _cell_of(rec: Mapping[str, Any]) -> Cell:
    """The planned cell a record ran (plan.json's fields), to run it again."""
    keys = (
        "run_id cell_id adapter base_adapter env python framework graph workload overrides spec param_count data "
        "device_requested precision force_precision profile threads pipeline sweep kernel_floor_s slowdown wait_s"
    ).split()
    return cast(Cell, {key: rec[key] for key in keys if key in rec})

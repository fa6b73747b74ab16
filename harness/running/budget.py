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
from harness.stats import verdicts

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


def next_generation_s(recs: list[Record], shares: Mapping[str, float] | None = None, factor: float = 1.0) -> float:
    """A further generation's time from these records of a group: the longest wall (the first
    worker lives through the whole generation) of its latest generation that a further one repeats
    as it ran (``repeats_as_is``: warm, side by side, no floors), where it has one. In the default
    run of 2026-11-27 (f), rnn-caption's third generation (356 s, its floors) less its floors as
    modelled came to 225 s where its second had taken 185 s, and its 4th missed by seconds.

    Without one, its latest generation's longest wall less what a later generation does not
    repeat: the dispatch floors that generation measured (``floors_wall_s``), its pipelined blocks
    (a cell's first process alone takes them: harness.running.resident) and, where that generation
    compiled cold, the share of each cell's cold compiles (``compile_excess_s``) that a warm start
    of its adapter saved elsewhere in the run (``shares``, from ``warm_shares``; none where not
    measured); and where it started its workers one at a time, the part of that start
    (``serial_start_s``) that starting them side by side saved elsewhere in the run (``factor``,
    from ``start_factor``)."""
    if not recs:
        return 0.0
    gens: dict[int, list[Record]] = {}
    for r in recs:
        gens.setdefault(round_of(r), []).append(r)
    as_is = [k for k, gen in gens.items() if repeats_as_is(gen)]
    if as_is:
        return max((r.get("wall_s") or 0.0 for r in gens[max(as_is)]), default=0.0)
    mine = gens[max(gens)]
    wall = max((r.get("wall_s") or 0.0 for r in mine), default=0.0)
    wall -= floors_wall_s(mine)
    wall -= sum(sum(r.get("pipelined_blocks_s") or []) for r in mine)
    if shares:
        cold = [r for r in mine if not r.get("warm_compiles")]
        wall -= sum(shares.get(records.base_adapter(r), 0.0) * compile_excess_s(r) for r in cold)
    side = any((r.get("starts_at_once") or 1) > 1 and "starting_s" in r for r in mine)
    if factor < 1.0 and not side:
        wall -= (1.0 - factor) * serial_start_s(mine, shares or {})
    return max(wall, 0.0)


def repeats_as_is(gen: Sequence[Record]) -> bool:
    """Whether a further generation of this generation's group would repeat it as it ran: started
    side by side, every worker warm (``warm_compiles``), no dispatch floor measured and no
    pipelined blocks (a cell's first process alone takes them)."""
    once = ("dispatch_floor_wall_s", "dispatch_floor_error", "pipelined_blocks_s")
    return (
        any((r.get("starts_at_once") or 1) > 1 for r in gen)
        and all(r.get("warm_compiles") for r in gen)
        and not any(r.get(f) for r in gen for f in once)
    )


def _floor_prepared_s(rec: Record) -> float:
    """Seconds of a record's dispatch floor spent in its worker's start: its preparation, or the whole
    floor where it was timed there too (``dispatch_floor_timed_s`` 0: schema 1, harness.records)."""
    return (rec.get("dispatch_floor_wall_s") or 0.0) - (rec.get("dispatch_floor_timed_s") or 0.0)


def floors_wall_s(gen: Sequence[Record]) -> float:
    """What a generation's dispatch floors added to its wall: their timing, one worker at a time
    once all were ready (``dispatch_floor_timed_s``), and their preparation within the workers'
    start, as its share of their start-up seconds (``ready_s``) of what the start took
    (``starting_s``): side by side, the preparations overlapped other starts."""
    timed = sum(r.get("dispatch_floor_timed_s") or 0.0 for r in gen)
    prepared = sum(_floor_prepared_s(r) for r in gen)
    ready = sum(r.get("ready_s") or 0.0 for r in gen)
    starting = max((r.get("starting_s") or 0.0 for r in gen), default=0.0)
    return timed + (prepared * min(starting / ready, 1.0) if ready > 0 and starting > 0 else prepared)


def serial_start_s(gen: Sequence[Record], shares: Mapping[str, float]) -> float:
    """What a generation's workers, started one at a time, took to start (``ready_s``) less their
    dispatch floors' preparation and, where they compiled cold, what a warm start saves
    (``shares``): the start a later generation of the same cells would take one at a time."""
    total = 0.0
    for r in gen:
        total += (r.get("ready_s") or 0.0) - _floor_prepared_s(r)
        if not r.get("warm_compiles"):
            total -= shares.get(records.base_adapter(r), 0.0) * compile_excess_s(r)
    return max(total, 0.0)


def start_factor(recs: Sequence[Record], shares: Mapping[str, float] | None = None) -> float:
    """How long a warm generation's start took with its workers side by side
    (harness.running.turns.starts_at_once: ``starting_s``) against the same group's first
    generation started one at a time (``serial_start_s``), over every group of the run that ran
    both, at most 1; 1 where none did (a later generation is then estimated one at a time)."""
    shares = warm_shares(recs) if shares is None else shares
    groups: dict[str, list[Record]] = {}
    for r in recs:
        if r.get("status") == "ok" and r.get("group"):
            groups.setdefault(str(r["group"]), []).append(r)
    side, alone = 0.0, 0.0
    for mine in groups.values():
        first = [r for r in mine if round_of(r) == 1 and (r.get("starts_at_once") or 1) == 1]
        later = {round_of(r): r["starting_s"] for r in mine if (r.get("starts_at_once") or 1) > 1 and "starting_s" in r}
        if first and later:
            side += sum(later.values()) / len(later)
            alone += serial_start_s(first, shares)
    return min(side / alone, 1.0) if alone > 0 else 1.0


def compile_excess_s(rec: Record) -> float:
    """What a process's cold window took beyond as many steady steps (its compiles, where it has
    any; the steady step time as the mean of its synced steps), 0 without one."""
    cold = rec.get("cold_times_s") or []
    step = rec.get("mean_s") or rec.get("median_s") or 0.0
    return max(sum(cold) - len(cold) * step, 0.0) if rec.get("status") == "ok" else 0.0


def warm_shares(recs: Sequence[Record]) -> dict[str, float]:
    """Adapter (its base adapter) -> the share of its cold compiles that a warm start saved
    (harness.running.turns.compile_cache), measured in this run in every group where the adapter
    ran a cold process and a warm one: 1 - (mean warm excess / cold excess) over those groups
    together, in [0, 1]. An adapter without such a group is left out: a later generation of it is
    estimated cold. How much a warm start saves is the adapter's (a compiler cache or none), not
    the workload's: eager adapters and TensorFlow's keep their cold start, near 0."""
    cold: dict[tuple[str, str], list[float]] = {}
    warm: dict[tuple[str, str], list[float]] = {}
    for r in recs:
        if r.get("status") == "ok" and r.get("cold_times_s"):
            key = (records.base_adapter(r), str(r.get("group") or records.setting_of(r)))
            (warm if r.get("warm_compiles") else cold).setdefault(key, []).append(compile_excess_s(r))
    spent: dict[str, list[float]] = {}
    for key in cold.keys() & warm.keys():
        pair = spent.setdefault(key[0], [0.0, 0.0])
        pair[0] += sum(cold[key]) / len(cold[key])
        pair[1] += sum(warm[key]) / len(warm[key])
    return {a: min(max(1.0 - w / c, 0.0), 1.0) for a, (c, w) in spent.items() if c > 0}


def committed_s(cost: float, k: int) -> float:
    """What starting generation ``k`` of a group commits a budget to, at ``cost`` a generation: it
    and, below MIN_GENERATIONS, the further ones its pairs need to be judged at all (two
    generations never decide a pair, so a second that no third follows buys nothing)."""
    return cost * max(1, verdicts.MIN_GENERATIONS - k + 1)


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
        if k > 1 and (g in dropped or budget.left() < committed_s(cost, k)):
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

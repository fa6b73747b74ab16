"""What a further generation of a group should take, from the records of the generations it ran:
the estimates a time budget starts generations by (harness.running.budget) and a report reads to
say how much more time a workload cut short would have needed. Pure functions of records.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from harness import records
from harness.records import Record, round_of
from harness.stats import verdicts


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


def floor_in_start_s(rec: Record) -> float:
    """Seconds of a record's dispatch floor spent in its worker's start: its preparation, or the whole
    floor where it was timed there too (``dispatch_floor_timed_s`` 0: schema 1, harness.records);
    none where it was prepared after the turns (``floor_after_turns``)."""
    if rec.get("floor_after_turns"):
        return 0.0
    return (rec.get("dispatch_floor_wall_s") or 0.0) - (rec.get("dispatch_floor_timed_s") or 0.0)


def _floor_after_start_s(rec: Record) -> float:
    """Seconds of a record's dispatch floor outside its worker's start, one worker at a time while the
    others waited: its timing, and its preparation where that came after the turns (a failed one too)."""
    timed = rec.get("dispatch_floor_timed_s") or 0.0
    return timed + (rec.get("floor_prepare_s") or 0.0) if rec.get("floor_after_turns") else timed


def floors_wall_s(gen: Sequence[Record]) -> float:
    """What a generation's dispatch floors added to its wall: what they took one worker at a time
    (``_floor_after_start_s``) and what they added to its start (``floors_in_start_s``)."""
    return sum(_floor_after_start_s(r) for r in gen) + floors_in_start_s(gen)


def floors_in_start_s(gen: Sequence[Record]) -> float:
    """What a generation's dispatch floors prepared in its workers' start (``floor_in_start_s``)
    added to that start: all of it where each worker warmed up while the others waited (``gated``:
    harness.running.resident) or they started one at a time; where they started side by side
    ungated, its share of their start-up seconds (``ready_s``) of what the start took
    (``starting_s``), since the preparations overlapped other starts."""
    prepared = sum(floor_in_start_s(r) for r in gen)
    ready = sum(r.get("ready_s") or 0.0 for r in gen)
    starting = max((r.get("starting_s") or 0.0 for r in gen), default=0.0)
    if any(r.get("gated") for r in gen) or not (ready > 0 and starting > 0):
        return prepared
    return prepared * min(starting / ready, 1.0)


def serial_start_s(gen: Sequence[Record], shares: Mapping[str, float]) -> float:
    """What a generation's workers, started one at a time, took to start (``ready_s``) less their
    dispatch floors' preparation and, where they compiled cold, what a warm start saves
    (``shares``): the start a later generation of the same cells would take one at a time."""
    total = 0.0
    for r in gen:
        total += (r.get("ready_s") or 0.0) - floor_in_start_s(r)
        if not r.get("warm_compiles"):
            total -= shares.get(records.base_adapter(r), 0.0) * compile_excess_s(r)
    return max(total, 0.0)


def start_factor(recs: Sequence[Record], shares: Mapping[str, float] | None = None) -> float:
    """How long a warm generation's start took with its workers side by side
    (harness.running.turns.starts_at_once: ``starting_s``) against the same group's first
    generation started one at a time (``serial_start_s``), over every group of the run that ran
    both, at most 1; 1 where none did (a later generation is then estimated one at a time)."""
    shares = warm_shares(recs) if shares is None else shares
    side, alone = 0.0, 0.0
    for mine in _groups(recs).values():
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


def generations_named(first: int, last: int) -> str:
    """``generation 3``, ``generations 2 and 3`` or ``generations 2 to 5``: the generations from
    ``first`` to ``last`` that a budget did not run, as the run's line and its report name them."""
    return "generation" + {0: f" {last}", 1: f"s {first} and {last}"}.get(last - first, f"s {first} to {last}")


def missing_s(recs: Sequence[Record], planned: int, cell_ids: Collection[str | None] | None = None) -> float:
    """What the generations up to ``planned`` that the groups holding ``cell_ids`` (every group
    where None) did not run should have taken, summed over those groups: each group's next
    generation (``next_generation_s``, with the warm shares and start factor of the whole run,
    ``recs``: a run's process records, as the budget reads them) times the generations it lacks. 0
    where every such group ran them, or where nothing is recorded to estimate from."""
    shares = warm_shares(recs)
    factor = start_factor(recs, shares)
    total = 0.0
    for mine in _groups(recs).values():
        if cell_ids is not None and not any(r.get("cell_id") in cell_ids for r in mine):
            continue
        lacking = planned - max(round_of(r) for r in mine)
        if lacking > 0:
            total += lacking * next_generation_s(mine, shares, factor)
    return total


def _groups(recs: Sequence[Record]) -> dict[str, list[Record]]:
    """The ``ok`` records of ``recs`` by their group (the cells that took turns together)."""
    groups: dict[str, list[Record]] = {}
    for r in recs:
        if r.get("status") == "ok" and r.get("group"):
            groups.setdefault(str(r["group"]), []).append(r)
    return groups

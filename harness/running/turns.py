"""Resident workers taking turns: how a run's cells are timed on this machine.

The cells compared with each other (a *group*: the same workload, setting, data mode, device and
precision, differing only by adapter) are timed together. A *generation* of a group (a record's
``round``) is one fresh worker process per cell, started one after another: each sets up and runs
its cold window alone, then waits idle (harness.running.resident). Then the parent runs *turns*:
each turn asks every worker, one at a time in a shuffled order, for one block of steps (tens of
milliseconds), while the others wait on their pipes. Turns milliseconds apart see the same machine,
so the machine's drift over minutes lands on every cell alike and cancels in their ratios; several
generations measure what differs between processes (harness.stats has the verdict rules).

A turn during which other processes used the CPU or the hypervisor stole it (/proc/stat,
harness.measuring.contention.MachineLoad) is left out for every worker and retaken, up to
MAX_DROPPED_SHARE of the turns; past that the turns are kept. The records are marked contended
when the kept turns, read together as one interval, show such load (one short turn is too few
clock ticks to tell on its own).

Memory: every worker of a generation is resident at once (its framework, model and data; on a GPU
a context each, with no preallocation). A group of more cells than ``resident_limit()`` allows runs
as several sub-groups, each its own group.

Dispatch floors (harness.running.cell_work.dispatch_floor, a second tiny instance of each adapter)
are timed once per cell, by its worker in its group's last planned generation before it says
``ready`` (the other workers wait idle), where the budget holds them beside it: the generations
before are what the verdicts need, and in round 1 the floors took over a quarter of a slow
group's start-up.

Cells that cannot take turns run alone as before (harness.running.runner.run_cell): the idiomatic
scripts of ``fidelity`` and image input pipelines (their loader workers would keep decoding while
other cells take their turns).

Compiler caches (``compile_cache``): each cell gets a compiler cache of its own for the run
(XLA's persistent cache, Inductor's caches), empty when its first process starts, so that process
compiles cold (its first step, cold window, compile counts and break-even are what the reports
show) and later processes, which are there for their steady state, start warm (``warm_compiles``
on their records) instead of paying the same compiles again. TensorFlow and eager adapters have
no such cache: theirs are cold in every process.
"""

from __future__ import annotations

import hashlib
import math
import random
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from adapters import AdapterInfo
from harness import records
from harness.measuring import timing
from harness.measuring.contention import MachineLoad
from harness.records import Record
from harness.running import runner
from harness.running.progress import MatrixProgress
from harness.running.resident_handle import Gone, Resident
from workloads.images import has_images

#: Fewest kept turns per generation: each is one block per worker, the unit the verdicts average.
MIN_TURNS = 8
MAX_TURNS = 500
#: Contended turns retaken, as a share of the turns wanted, before contended ones are kept.
MAX_DROPPED_SHARE = 1.0
#: Memory one resident worker may take on a CPU machine (a framework, its model and data).
WORKER_BYTES = 1.5 * 2**30
#: GPU memory one resident worker may take: a CUDA context (~0.5 GiB) and the default workloads.
GPU_WORKER_BYTES = 2 * 2**30
#: Without a reply to a turn in this many seconds (or the cell's timeout, if shorter), a worker is hung.
TURN_TIMEOUT_S = 120.0
#: With a budget, the share of what is left that a generation's turns may take (the rest is
#: start-up: imports, set-up, compiles), down to a quarter of the profile's turn seconds.
TURN_SHARE = 0.4
#: Generations a group may get when a budget adds them to unsettled groups (looks at its verdicts).
MAX_GENERATIONS = 4


def compile_cache(results: Path, cell: Record, k: int) -> Record:
    """The fields that give generation ``k`` of a cell its compiler cache (module docstring): the
    folder, one per run and cell (emptied before the cell's first process, so that one compiles
    cold even where an interrupted run left it), and whether an earlier process may have filled it."""
    folder = cache_root(results) / _digest(cell["cell_id"])
    if k == 1:
        shutil.rmtree(folder, ignore_errors=True)
    return {"compile_cache_dir": str(folder), "warm_compiles": k > 1}


def cache_root(results: Path) -> Path:
    """Where a run's compiler caches live while it runs: a temporary folder named after the run's
    results file (two runs never share one), never inside the run's own folder."""
    return Path(tempfile.gettempdir()) / f"dlcompare-compile-cache-{_digest(str(results.resolve()))}"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def group_of(cell: Record) -> str:
    """The group key: the cell's id without its adapter (the same for the same setting in any run)."""
    return cell["cell_id"].split("|", 1)[1]


def servable(cell: Record) -> bool:
    """Whether a cell can take turns (the module docstring says which cannot)."""
    if cell.get("script"):
        return False
    if cell.get("data") == "loader":
        return not has_images(records.spec_of(cell))
    return True


def resident_limit(device: str = "cpu", gpu_free_bytes: int | None = None, worker_bytes: float | None = None) -> int:
    """Workers that may be resident at once (at least 2): what the available host memory holds at
    ``worker_bytes`` each (a cell's own, else WORKER_BYTES), and on a GPU also what its free memory
    holds at GPU_WORKER_BYTES each (a CUDA context, the model and data; the frameworks are set not
    to preallocate). ``gpu_free_bytes``: read with
    NVML where not given; without NVML the host's limit alone."""
    limit = int(psutil.virtual_memory().available * 0.8 // (worker_bytes or WORKER_BYTES))
    if device == "cuda":
        free = gpu_free_bytes if gpu_free_bytes is not None else _gpu_free_bytes()
        if free is not None:
            limit = min(limit, int(free * 0.8 // GPU_WORKER_BYTES))
    return max(2, limit)


def _gpu_free_bytes() -> int | None:
    """Free memory of the GPU the cells use (NVML, the first visible GPU), None without NVML."""
    try:
        import pynvml

        from harness.measuring.gpu_util import cell_gpu

        pynvml.nvmlInit()
        try:
            kind, key = cell_gpu()
            get = pynvml.nvmlDeviceGetHandleByUUID if kind == "uuid" else pynvml.nvmlDeviceGetHandleByIndex
            return int(pynvml.nvmlDeviceGetMemoryInfo(get(key if kind == "uuid" else int(key))).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver: the host's limit stands
        return None


@dataclass
class Turns:
    """How long a generation takes turns: at least ``min_turns`` kept turns, then until
    ``seconds`` are spent (or ``max_turns``)."""

    seconds: float
    min_turns: int = MIN_TURNS
    max_turns: int = MAX_TURNS


@dataclass
class Budget:
    """A run's time budget in seconds (None: no budget, fixed generations), counted from the
    start of this process (the bench command: its doctor, peaks and floors are in it)."""

    total_s: float | None
    t0: float = field(default_factory=lambda: time.monotonic() - (time.time() - psutil.Process().create_time()))
    #: Seconds kept back for the run's closing (its peaks again and the report): see keep_back_for_closing.
    reserve_s: float = 0.0

    def spent(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds a generation may still start in (the closing's reserve excluded)."""
        return math.inf if self.total_s is None else self.total_s - self.spent() - self.reserve_s

    def keep_back_for_closing(self) -> None:
        """Keep back as much as the run has spent so far, its start (imports, doctor, device peaks,
        kernel floors), for its closing (the peaks again, the report): without it a run whose last
        generation fitted ended that much past its budget."""
        self.reserve_s = self.spent()


def run_generation(
    cells: list[Record],
    k: int,
    adapters: Mapping[str, AdapterInfo],
    results: Path,
    timeout_s: float,
    progress: MatrixProgress,
    ended: set[str],
    plan: Turns,
    first_turn: int,
    extra: Record,
    group: str | None = None,
    floors: bool = False,
) -> int:
    """Generation ``k`` of one group (module docstring): every cell's worker started and warmed
    up in turn, then turns, then each record (with ``extra`` fields) appended to ``results``; with
    ``floors``, each cell whose dispatch floor no earlier record holds times it before its turns.
    A cell that is skipped, fails or hangs gets its record; the others go on. Returns the next
    free turn number. Every worker is ended on the way out, also on an interruption."""
    residents: list[Resident] = []
    rng = random.Random(f"{cells[0]['run_id']}:{group_of(cells[0])}:{k}")
    order = list(cells)
    rng.shuffle(order)
    extra = {**extra, "group": group or group_of(cells[0])}

    def done(rec: Record) -> None:
        runner.finish_round({**rec, **extra}, extra["rounds"], results, progress, ended)

    def take(turn: int) -> None:
        """One turn: every resident worker's block, in a shuffled order; a worker lost fails its cell."""
        for r in rng.sample(residents, len(residents)):
            try:
                r.turn(turn, min(timeout_s, TURN_TIMEOUT_S))
            except Gone as exc:
                residents.remove(r)
                done(r.record(f"{exc} during turn {turn}"))

    measured = floors_measured(results) if floors else set()
    try:
        for cell in order:
            cell_k = {**cell, "round": k, **compile_cache(results, cell, k)}
            if floors and cell["cell_id"] not in measured:
                cell_k["dispatch_floor"] = True
            progress.start(cell, k)
            try:
                reason = runner.skip_reason(adapters[records.base_adapter(cell)], cell_k)
            except Exception as exc:  # noqa: BLE001 - a bad spec is the cell's failure
                done(records.new_record(cell_k, "failed", f"{type(exc).__name__}: {exc}"))
                continue
            if reason:
                done(records.new_record(cell_k, "skipped", reason))
                continue
            r = Resident(adapters[records.base_adapter(cell)], cell_k)
            if r.ready(timeout_s):
                residents.append(r)
            else:
                done(r.record())
        turn, kept, dropped, loads = first_turn, [], 0, []
        # A warm-up turn, not kept: the first after a long wait (caches, thread pools asleep) is no steady step.
        take(turn)
        turn += 1
        start = time.monotonic()
        while residents and len(kept) < plan.max_turns:
            if len(kept) >= plan.min_turns and time.monotonic() - start >= plan.seconds:
                break
            load = MachineLoad()
            load.start([r.proc.pid for r in residents])
            take(turn)
            load.stop()
            if load.contended and dropped < MAX_DROPPED_SHARE * max(plan.min_turns, len(kept)):
                dropped += 1
            else:
                kept.append(turn)
                loads.append(load)
            turn += 1
        # The cell's tag reads all kept turns as one interval: one short turn is too few ticks to tell.
        whole = MachineLoad.combined(loads)
        turn_fields = {
            "turns_dropped": dropped,
            "turns_contended": sum(ld.contended for ld in loads),
            "contended": whole.contended,
            "other_cpu_cores": whole.other_cores,
            "steal_share": whole.steal,
        }
        while residents:
            r = residents.pop(0)
            rec = r.finish(kept, timeout_s)
            done({**rec, **turn_fields} if rec["status"] == "ok" else rec)
        return turn
    finally:
        for r in residents:
            r.kill()
            r.close()


def generation_s(results: Path, cells: list[Record]) -> float:
    """What a further generation of these cells should take (``next_generation_s``), 0 where none
    is recorded. A generation is started only when this fits in what is left of a budget."""
    ids = {c["cell_id"] for c in cells}
    done = records.load(results) if results.exists() else []
    return next_generation_s([r for r in done if r.get("cell_id") in ids])


def next_generation_s(recs: list[Record]) -> float:
    """A further generation's time from these records of a group, its dispatch floors left out:
    its latest generation's longest wall (the first worker lives through the whole generation)
    less the dispatch floors that generation measured (``dispatch_floor_wall_s``, each worker's
    in turn before the next starts). After the first generation its warm compiles are not counted on: an
    over-estimate."""
    if not recs:
        return 0.0
    last = max(records_round(r) for r in recs)
    mine = [r for r in recs if records_round(r) == last]
    wall = max((r.get("wall_s") or 0.0 for r in mine), default=0.0)
    wall -= sum(r.get("dispatch_floor_wall_s") or 0.0 for r in mine)
    return max(wall, 0.0)


#: A record's fields that say its cell's dispatch floor was tried (a value, or why it failed).
FLOOR_FIELDS = ("dispatch_floor_s", "dispatch_floor_error")


def floors_measured(results: Path) -> set[str]:
    """Cells of the run whose dispatch floor a record already holds (measured or failed)."""
    return _floored(records.load(results) if results.exists() else [])


def _floored(done: list[Record]) -> set[str]:
    return {r["cell_id"] for r in done if any(f in r for f in FLOOR_FIELDS)}


def floors_s(results: Path, cells: list[Record]) -> float:
    """What timing the dispatch floors still missing among ``cells`` should take: each such cell's
    set-up and cold window in its first process (a floor is a second, tiny instance of the
    adapter, set up, compiled and timed the same way; the floors measured in the 2026-11-25
    default run took 0.4-1.4x that). 0 where none is recorded."""
    done = records.load(results) if results.exists() else []
    ids = {c["cell_id"] for c in cells} - _floored(done)
    return sum(
        (r.get("setup_s") or 0.0) + sum(r.get("cold_times_s") or [])
        for r in done
        if r.get("cell_id") in ids and records_round(r) == 1
    )


def turn_seconds(cells: list[Record]) -> float:
    """Seconds of turns a generation of these cells takes without a budget: its profile's
    ``turn_s`` per cell."""
    return sum(timing.PROFILES[c["profile"]].turn_s for c in cells)


def next_turn(results: Path) -> int:
    """The first turn number no record of the run has used (turns are numbered run-wide)."""
    done = records.load(results) if results.exists() else []
    return 1 + max((t for r in done for t in r.get("turn_ids") or []), default=0)


def split(cells: list[Record], limit: int) -> list[list[Record]]:
    """A group's cells in sub-groups of at most ``limit`` resident workers, as even as possible."""
    parts = math.ceil(len(cells) / limit)
    return [cells[i::parts] for i in range(parts)]


def run(
    order: list[tuple[Record, int]],
    rounds: int,
    adapters: Mapping[str, AdapterInfo],
    results: Path,
    timeout_s: float,
    progress: MatrixProgress,
    budget: Budget | None = None,
    level: float = 0.95,
) -> None:
    """Run (cell, round) pairs (harness.running.rounds.schedule): each round of a group as one
    generation taking turns, round 1 of every group before any further round, then each group's
    further rounds one after another; cells that cannot take turns alone. With a ``budget``, a
    round after the first is not started once it is spent, and what is left after the planned
    rounds goes to more generations of the groups whose verdicts are unsettled (harness.stats), up
    to MAX_GENERATIONS. Records carry ``verdict_level``."""
    budget = budget or Budget(None)
    try:
        _run(order, rounds, adapters, results, timeout_s, progress, budget, level)
    finally:
        shutil.rmtree(cache_root(results), ignore_errors=True)


def _run(
    order: list[tuple[Record, int]],
    rounds: int,
    adapters: Mapping[str, AdapterInfo],
    results: Path,
    timeout_s: float,
    progress: MatrixProgress,
    budget: Budget,
    level: float,
) -> None:
    ended: set[str] = set()
    extra = {"verdict_level": level, "rounds": rounds}
    solo = [(c, k) for c, k in order if not servable(c)]
    generations: dict[tuple[int, str], list[Record]] = {}
    for cell, k in order:
        if servable(cell):
            generations.setdefault((k, group_of(cell)), []).append(cell)
    if solo:
        runner.run_cells(solo, rounds, adapters, results, timeout_s, progress)
    turn = next_turn(results)
    # Round 1 of every group first (every cell present, whatever the budget), then a group's
    # further rounds together: a budget that runs out leaves some groups judged, not all unjudged.
    order_of: dict[str, int] = {}
    for _, g in generations:
        order_of.setdefault(g, len(order_of))
    pending = sorted(generations.items(), key=lambda item: (item[0][0] > 1, order_of[item[0][1]], item[0][0]))
    while pending:
        (k, _), cells = pending.pop(0)
        cells = [c for c in cells if c["cell_id"] not in ended]
        if not cells:
            continue
        cost = generation_s(results, cells)
        if k > 1 and budget.left() < cost:
            for _ in cells:
                progress.drop()
            continue
        # The floors in the group's last planned generation, where they fit beside it: the
        # generations before it are what the verdicts need.
        floors = k >= rounds and budget.left() >= cost + floors_s(results, cells)
        parts = split(cells, resident_limit(cells[0]["device_requested"], worker_bytes=cells[0].get("worker_bytes")))
        for i, part in enumerate(parts):
            seconds = turn_seconds(part)
            if budget.total_s is not None:
                # never more than the profile's turns: between-process spread dominates a verdict's
                # error, so a budget's seconds buy generations, not longer ones (round 1 of mlp took
                # 104 turns where later generations took 29)
                seconds = min(seconds, max(seconds / 4, budget.left() * TURN_SHARE / (1 + len(pending))))
            group = group_of(part[0]) + (f"#part{i + 1}" if len(parts) > 1 else "")
            turn = run_generation(
                part, k, adapters, results, timeout_s, progress, ended, Turns(seconds), turn, extra, group, floors
            )
    if budget.total_s is not None:
        more_generations(rounds, adapters, results, timeout_s, progress, budget, ended, turn, extra)


def more_generations(
    rounds: int,
    adapters: Mapping[str, AdapterInfo],
    results: Path,
    timeout_s: float,
    progress: MatrixProgress,
    budget: Budget,
    ended: set[str],
    turn: int,
    extra: Record,
) -> None:
    """With budget left after the planned rounds: another generation of the group with the most
    unsettled verdicts, while one fits in what is left (judged by that group's last generation)."""
    while budget.left() > 0:
        recs = records.load(results)
        wanted = unsettled_groups(recs, extra["verdict_level"])
        candidates = []
        for group, count in wanted.items():
            mine = [r for r in recs if r.get("group") == group]
            k = max(records_round(r) for r in mine)
            cost = next_generation_s(mine)
            if k < MAX_GENERATIONS and cost < budget.left():
                candidates.append((-count, group, k, mine))
        if not candidates:
            return
        _, group, k, mine = min(candidates, key=lambda c: c[:2])
        cells = {r["cell_id"]: r for r in mine if r["status"] == "ok" and r["cell_id"] not in ended}
        planned = [_cell_of(r) for r in cells.values()]
        progress.add(len(planned))
        seconds = turn_seconds(planned)
        floors = budget.left() >= next_generation_s(mine) + floors_s(results, planned)
        turn = run_generation(
            planned, k + 1, adapters, results, timeout_s, progress, ended, Turns(seconds), turn, extra, group, floors
        )


def unsettled_groups(recs: list[Record], level: float) -> dict[str, int]:
    """Group -> how many of its pairs of ``ok`` cells are not settled (harness.stats.verdicts.settled),
    and how many of its cells are separated from the leader alone but not family-wise (``family``)."""
    from harness.stats import verdicts
    from harness.stats.cells import combine_all

    by_group: dict[str, list[Record]] = {}
    for rec in combine_all(recs):
        if rec["status"] == "ok" and rec.get("group"):
            by_group.setdefault(rec["group"], []).append(rec)
    counts = {}
    for group, cells in by_group.items():
        n = sum(not verdicts.settled(a, b, level) for i, a in enumerate(cells) for b in cells[i + 1 :])
        if len(cells) >= 2:  # and the reports' family-wise marks: separated alone, not against the leader
            n += sum(v.reason == verdicts.FAMILY for _, v in verdicts.family(cells, level).rivals)
        if n:
            counts[group] = n
    return counts


def verdict_level(rounds: int, budget_s: float | None) -> float:
    """The confidence level of the run's verdicts: 95%, or with a budget (which may look at a
    group's verdicts after each generation from ``rounds`` up to MAX_GENERATIONS and stop when
    they are settled) Pocock's per-look level, so repeated looks keep 5% overall."""
    if budget_s is None:
        return 0.95
    from harness.stats import verdicts

    return verdicts.pocock_level(max(1, MAX_GENERATIONS - rounds + 1))


def records_round(rec: Record) -> int:
    return int(rec.get("round") or 1)


#: Fields of a record that its worker measured; what is left is the cell as planned.
def _cell_of(rec: Record) -> Record:
    """The planned cell a record ran (plan.json's fields), to run it again."""
    keys = (
        "run_id cell_id adapter base_adapter env python framework graph workload overrides spec param_count data "
        "device_requested precision force_precision profile threads pipeline sweep kernel_floor_s slowdown"
    ).split()
    return {key: rec[key] for key in keys if key in rec}
